//go:build ucx

package ucx

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// childEnv makes the test binary run as a node process (runNodeChild).
const childEnv = "VELO_UCX_NODE_CHILD"

func init() {
	runChild = func() bool {
		if os.Getenv(childEnv) == "" {
			return false
		}
		runNodeChild()
		return true
	}
}

// runNodeChild is a node with the UCX transport alone: it prints its peer
// info, reads the parent's from stdin and registers it, answers "echo",
// never answers "block" (it prints "blocked" instead), and lives until
// stdin closes or it is killed.
func runNodeChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	tr, err := New(WithTLS("tcp"))
	if err != nil {
		fail(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		fail(err)
	}
	blocked := make(chan struct{}, 16)
	n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil }))
	n.Register(velo.UnaryHandler("block", func(c *velo.Context) ([]byte, error) {
		blocked <- struct{}{}
		<-c.Context().Done()
		return nil, c.Context().Err()
	}))
	out, _ := json.Marshal(n.PeerInfo())
	fmt.Println(string(out))
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fail(err)
	}
	var parent ext.PeerInfo
	if err := json.Unmarshal(line, &parent); err != nil {
		fail(err)
	}
	if err := n.RegisterPeer(parent); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	go func() {
		for range blocked {
			fmt.Println("blocked")
		}
	}()
	io.Copy(io.Discard, in)
	n.Shutdown(context.Background())
	os.Exit(0)
}

// child is a running node process.
type child struct {
	cmd   *exec.Cmd
	info  ext.PeerInfo
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	if err := json.Unmarshal([]byte(c.line(t)), &c.info); err != nil {
		t.Fatalf("child's peer info: %v", err)
	}
	return c
}

func (c *child) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatal("the child exited")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("the child said nothing for 20 s")
	}
	return ""
}

// Two velo nodes in two processes, UCX alone between them: unary calls
// both ways work, and when the callee is killed (SIGKILL: its sockets
// close without a word) a call waiting on it fails at once with
// ErrPeerUnreachable, long before its deadline: UCX fails our endpoint to
// the dead worker and the transport reports the peer lost.
func TestNodesOverUCXAndAKilledPeer(t *testing.T) {
	if !peerErrors() {
		t.Skip("these UCX transports detect no lost peer")
	}
	c := startChild(t)
	tr := newReal(t)
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	if err := n.RegisterPeer(c.info); err != nil {
		t.Fatal(err)
	}
	me, _ := json.Marshal(n.PeerInfo())
	fmt.Fprintln(c.stdin, string(me))
	if l := c.line(t); l != "ready" {
		t.Fatalf("child: %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 50 {
		want := fmt.Sprintf("call %d", i)
		got, err := n.Unary(ctx, c.info.InstanceID, "echo", []byte(want))
		if err != nil || string(got) != want {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	res := make(chan error, 1)
	go func() {
		_, err := n.Unary(ctx, c.info.InstanceID, "block", nil)
		res <- err
	}()
	if l := c.line(t); l != "blocked" {
		t.Fatalf("child: %q", l)
	}
	killed := time.Now()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = <-res
	took := time.Since(killed)
	t.Logf("the pending call failed %v after the kill: %v", took, err)
	if !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("pending call: %v, want ErrPeerUnreachable", err)
	}
	// The bound is loose for a shared machine; the call's deadline is 30 s.
	if took > 5*time.Second {
		t.Fatalf("the call failed %v after the kill", took)
	}
}

// Two nodes with TCP beside UCX: with UCX's priority above TCP's the
// calls go over UCX (its lane counts them), and UCX's RDMA backend reaches
// the peer.
func TestNodesWithTCPBeside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var nodes [2]*velo.Node
	var trs [2]*Transport
	for i := range nodes {
		tcpTr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
		if err != nil {
			t.Fatal(err)
		}
		trs[i] = newReal(t, WithPriority(300))
		n, err := velo.New(ctx, velo.WithTransport(tcpTr), velo.WithTransport(trs[i]))
		if err != nil {
			t.Fatal(err)
		}
		defer n.Shutdown(context.Background())
		n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil }))
		nodes[i] = n
	}
	a, b := nodes[0], nodes[1]
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		want := fmt.Sprintf("call %d", i)
		if got, err := a.Unary(ctx, b.InstanceID(), "echo", []byte(want)); err != nil || string(got) != want {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	st := trs[0].LaneStats(b.InstanceID())
	if len(st) == 0 || st[0].FramesWritten < 20 {
		t.Fatalf("UCX lane to the peer: %+v, want the 20 calls", st)
	}
	if !trs[0].RDMA().Reachable(b.InstanceID().WorkerID()) {
		t.Fatal("the peer is not reachable by RDMA")
	}
}
