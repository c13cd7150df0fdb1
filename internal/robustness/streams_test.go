package robustness_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// streamChildEnv makes the test binary run as a stream peer process: its
// value is the role ("consumer" or "opener"); streamMuxEnv set to "off"
// turns its mux off (the per-stream path).
const (
	streamChildEnv = "VELO_ROBUSTNESS_STREAM_CHILD"
	streamMuxEnv   = "VELO_ROBUSTNESS_STREAM_MUX"
)

// streamHello is what a stream peer process says on stdout once ready.
type streamHello struct {
	PeerInfo ext.PeerInfo
	Handle   wire.AnchorHandle // the consumer's anchor
}

// runStreamChild is a consumer (an anchor nobody reads) or an opener (a
// node that answers "ping" and does nothing else), until it is killed.
func runStreamChild() {
	opts := []velo.Option{}
	if os.Getenv(streamMuxEnv) == "off" {
		opts = append(opts, velo.WithMux(streaming.MuxConfig{Disabled: true}))
	}
	tr, err := tcp.New()
	if err != nil {
		fail(err)
	}
	n, err := velo.New(context.Background(), append(opts, velo.WithTransport(tr))...)
	if err != nil {
		fail(err)
	}
	if err := n.Register(velo.UnaryHandler("ping", func(*velo.Context) ([]byte, error) { return nil, nil })); err != nil {
		fail(err)
	}
	hello := streamHello{PeerInfo: n.PeerInfo()}
	if os.Getenv(streamChildEnv) == "consumer" {
		a, err := streaming.CreateAnchor[[]byte](n.Streams)
		if err != nil {
			fail(err)
		}
		hello.Handle = a.Handle()
	}
	b, err := json.Marshal(hello)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
	select {} // until the parent kills it
}

// startStreamChild runs the test binary as a stream peer of role, and
// returns it with its hello and its reaper.
func startStreamChild(t *testing.T, role string, mux bool) (*exec.Cmd, streamHello, func() time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), streamChildEnv+"="+role)
	if !mux {
		cmd.Env = append(cmd.Env, streamMuxEnv+"=off")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	reap := reaper(cmd)
	t.Cleanup(func() {
		cmd.Process.Kill()
		reap()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	var hello streamHello
	select {
	case s := <-line:
		must(t, json.Unmarshal([]byte(s), &hello))
	case <-time.After(failAfter):
		t.Fatal("the stream child did not start")
	}
	return cmd, hello, reap
}

// hardBound is where a measured delay fails a test: the bounds below are
// logged, and a loaded machine may miss them; only an absurd delay fails.
const hardBound = 2 * time.Second

// A consumer process killed (SIGKILL) while a producer on this node
// streams to it: the producer's Sender.Context ends with ErrConsumerLost
// soon after the process is gone (logged; bound 100 ms), on the mux and
// on the per-stream path. Without it the producer had no context to
// watch.
func TestKilledConsumerEndsSenderContext(t *testing.T) {
	for _, mux := range []bool{true, false} {
		name := map[bool]string{true: "mux", false: "tcp-stream"}[mux]
		t.Run(name, func(t *testing.T) {
			var opts []velo.Option
			if !mux {
				opts = append(opts, velo.WithMux(streaming.MuxConfig{Disabled: true}))
			}
			n := newNode(t, opts...)
			cmd, hello, reap := startStreamChild(t, "consumer", mux)
			must(t, n.RegisterPeer(hello.PeerInfo))
			ctx, cancel := context.WithTimeout(context.Background(), failAfter)
			defer cancel()
			s, err := streaming.AttachAnchor[[]byte](ctx, n.Streams, hello.Handle)
			must(t, err)
			defer s.Close()
			sctx := s.Context()
			must(t, s.Send(ctx, []byte("first")))

			killed, gone := killAndReap(t, cmd, reap)
			select {
			case <-sctx.Done():
				at := time.Now()
				goneAt := <-gone
				d := at.Sub(goneAt)
				t.Logf("%s: the Sender's context ended %v after the kill, %v after the process was gone (bound 100 ms)", name, at.Sub(killed), d)
				if c := context.Cause(sctx); !errors.Is(c, streaming.ErrConsumerLost) {
					t.Errorf("cause %v, want ErrConsumerLost", c)
				}
				if d > hardBound {
					t.Errorf("the Sender's context ended %v after the consumer was gone", d)
				}
				if !isClosed(s.Cancelled()) || isClosed(s.Stopped()) {
					t.Error("a lost consumer must close Cancelled, not Stopped")
				}
			case <-time.After(failAfter):
				t.Fatal("the Sender's context never ended after its consumer was killed")
			}
		})
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// An anchor waiting for a named opener (streaming.ExpectOpener), whose
// opener process is killed before it attaches: Next fails with
// ErrOpenerLost soon after the process is gone (logged; bound 100 ms),
// not at the reservation window (120 s unattached, 180 s for a pre-bind).
// Both a pending anchor and a pre-bound one (PrebindAnchor).
func TestKilledOpenerFailsTheAnchor(t *testing.T) {
	for _, prebind := range []bool{false, true} {
		name := map[bool]string{false: "pending", true: "prebound"}[prebind]
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			cmd, hello, reap := startStreamChild(t, "opener", true)
			must(t, n.RegisterPeer(hello.PeerInfo))
			ctx, cancel := context.WithTimeout(context.Background(), failAfter)
			defer cancel()
			_, err := n.Unary(ctx, hello.PeerInfo.InstanceID, "ping", nil) // this node now holds a connection to it
			must(t, err)
			a, err := streaming.CreateAnchor[[]byte](n.Streams, streaming.ExpectOpener(hello.PeerInfo.InstanceID))
			must(t, err)
			defer a.Close()
			if prebind {
				_, err := n.Streams.PrebindAnchor(a.Handle())
				must(t, err)
			}
			type result struct {
				at  time.Time
				err error
			}
			out := make(chan result, 1)
			go func() {
				_, err := a.Next(ctx)
				out <- result{time.Now(), err}
			}()

			killed, gone := killAndReap(t, cmd, reap)
			select {
			case r := <-out:
				goneAt := <-gone
				d := r.at.Sub(goneAt)
				t.Logf("%s: Next failed %v after the kill, %v after the opener was gone (bound 100 ms)", name, r.at.Sub(killed), d)
				if !errors.Is(r.err, streaming.ErrOpenerLost) {
					t.Errorf("Next = %v, want ErrOpenerLost", r.err)
				}
				if d > hardBound {
					t.Errorf("Next failed %v after the opener was gone", d)
				}
			case <-time.After(failAfter):
				t.Fatal("the anchor never failed after its opener was killed")
			}
		})
	}
}
