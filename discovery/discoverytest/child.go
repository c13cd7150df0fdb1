package discoverytest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Environment of a child process started by StartChild.
const (
	ChildEnv   = "VELO_DISCOVERY_CHILD"    // the backend's address; set only in the child
	childIDEnv = "VELO_DISCOVERY_CHILD_ID" // the instance to register
)

// ChildPeer is the PeerInfo a child registers for id.
func ChildPeer(id ext.InstanceID) ext.PeerInfo {
	return ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
}

// RunChild is what a child does: register with register, say so on
// stdout, then wait to be killed. Call it from TestMain when ChildEnv is set.
func RunChild(register func(addr string, info ext.PeerInfo) error) {
	id, err := ext.ParseInstanceID(os.Getenv(childIDEnv))
	if err == nil {
		err = register(os.Getenv(ChildEnv), ChildPeer(id))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	fmt.Println("registered")
	time.Sleep(time.Minute) // the parent kills it long before
	os.Exit(2)
}

// StartChild runs this test binary as a child process that registers a
// fresh peer with the backend at addr, and returns the peer and a kill
// function that ends the child with SIGKILL, as a crash would.
func StartChild(t *testing.T, addr string) (ext.PeerInfo, func()) {
	t.Helper()
	info := ChildPeer(ext.NewInstanceID())
	s, kill := startSelf(t, "child", ChildEnv+"="+addr, childIDEnv+"="+info.InstanceID.String())
	if s != "registered\n" {
		t.Fatalf("child said %q", s)
	}
	return info, kill
}

// startSelf runs this test binary as a child process with env added,
// waits for the first line it prints (what names the child says), and
// returns that line and a kill function that sends SIGKILL and reaps the
// process, which the test's cleanup also runs.
func startSelf(t *testing.T, name string, env ...string) (string, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(kill)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		return s, kill
	case <-time.After(Wait):
		t.Fatalf("the %s process did not register", name)
	}
	return "", kill
}
