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
	"github.com/velo-go/velo/transport/tcp"
)

// callerEnv makes the test binary run as a caller process; its value is
// the JSON PeerInfo of the node to call.
const callerEnv = "VELO_ROBUSTNESS_CALLER"

// runCaller calls the "hang" handler of the node named in callerEnv, with
// no deadline, and waits to be killed.
func runCaller() {
	var info ext.PeerInfo
	if err := json.Unmarshal([]byte(os.Getenv(callerEnv)), &info); err != nil {
		fail(err)
	}
	tr, err := tcp.New()
	if err != nil {
		fail(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		fail(err)
	}
	if err := n.RegisterPeer(info); err != nil {
		fail(err)
	}
	fmt.Println("calling")
	_, err = n.Unary(context.Background(), info.InstanceID, "hang", nil)
	fail(fmt.Errorf("the call returned: %v", err)) // the parent kills this process first
}

// A caller process killed (SIGKILL) while its handler runs on another
// node: the handler's context ends within 100 ms of the process being
// gone (see killAndReap for why the clock starts there), with
// ErrCallerLost as its cause. Without handler contexts the handler would
// run on with nobody waiting for it.
func TestKilledCallerEndsItsHandlersContext(t *testing.T) {
	srv := newNode(t)
	type ended struct {
		at    time.Time
		cause error
	}
	started, out := make(chan struct{}, 1), make(chan ended, 1)
	must(t, srv.Register(velo.UnaryHandler("hang", func(c *velo.Context) ([]byte, error) {
		ctx := c.Context()
		started <- struct{}{}
		<-ctx.Done()
		out <- ended{time.Now(), context.Cause(ctx)}
		return nil, ctx.Err()
	})))
	info, err := json.Marshal(srv.PeerInfo())
	must(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), callerEnv+"="+string(info))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	reap := reaper(cmd)
	t.Cleanup(func() {
		cmd.Process.Kill()
		reap()
	})
	go bufio.NewReader(stdout).ReadString('\n') // "calling"; the pipe must not fill
	select {
	case <-started:
	case <-time.After(failAfter):
		t.Fatal("the caller's request never reached the handler")
	}

	killed, gone := killAndReap(t, cmd, reap)
	select {
	case e := <-out:
		goneAt := <-gone
		d := e.at.Sub(goneAt)
		t.Logf("the handler's context ended %v after the kill, %v after the process was gone", e.at.Sub(killed), d)
		if !errors.Is(e.cause, velo.ErrCallerLost) {
			t.Errorf("cause %v, want ErrCallerLost", e.cause)
		}
		if d > promptly {
			t.Errorf("the handler's context ended %v after its caller's process was gone, want at most %v", d, promptly)
		}
	case <-time.After(failAfter):
		t.Fatal("the handler's context never ended after its caller was killed")
	}
}
