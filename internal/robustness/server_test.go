package robustness_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// serverEnv makes the test binary run as a server process; its value is
// the address to listen on.
const serverEnv = "VELO_ROBUSTNESS_SERVER"

// serverHello is the server's first line on stdout.
type serverHello struct {
	PeerInfo ext.PeerInfo  `json:"peer_info"`
	Event    events.Handle `json:"event"`
}

// runServer serves until stdin closes or the process is killed:
//   - "work" counts and answers;
//   - "count" answers how many "work" requests ran here;
//   - "block" never answers; each one prints "blocked N" when it starts.
//
// Its first line holds its peer info and the handle of a pending event.
func runServer() {
	tr, err := tcp.New(tcp.WithListenAddr(os.Getenv(serverEnv)))
	if err != nil {
		fail(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		fail(err)
	}
	var work, blocked atomic.Int64
	out := make(chan string, 1024)
	must := func(err error) {
		if err != nil {
			fail(err)
		}
	}
	must(n.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) {
		work.Add(1)
		return []byte("done"), nil
	})))
	must(n.Register(velo.UnaryHandler("count", func(*velo.Context) ([]byte, error) {
		return []byte(strconv.FormatInt(work.Load(), 10)), nil
	})))
	must(n.Register(velo.UnaryHandler("block", func(*velo.Context) ([]byte, error) {
		out <- fmt.Sprintf("blocked %d", blocked.Add(1))
		select {} // until the process dies
	})))
	ev, err := n.Events.NewEvent()
	must(err)
	hello, err := json.Marshal(serverHello{PeerInfo: n.PeerInfo(), Event: ev.Handle()})
	must(err)
	fmt.Println(string(hello))
	go func() {
		for line := range out {
			fmt.Println(line)
		}
	}()
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	// The event must outlive the test: one the collector finds unreachable
	// is poisoned as dropped (events.Manager's safety net), and a waiter
	// then sees that instead of the loss of this process.
	runtime.KeepAlive(ev)
	os.Exit(0)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "server:", err)
	os.Exit(2)
}

// server is a running server process.
type server struct {
	cmd   *exec.Cmd
	hello serverHello
	lines chan string
}

// startServer runs the test binary as a server listening on addr.
func startServer(t *testing.T, addr string) *server {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+addr)
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
	s := &server{cmd: cmd, lines: make(chan string, 1024)}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	select {
	case line, ok := <-s.lines:
		if !ok {
			t.Fatal("server exited before it said hello")
		}
		if err := json.Unmarshal([]byte(line), &s.hello); err != nil {
			t.Fatalf("server hello %q: %v", line, err)
		}
	case <-time.After(failAfter):
		t.Fatal("server did not start")
	}
	return s
}

// waitLine waits for the server to print want.
func (s *server) waitLine(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(failAfter)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("server exited before printing %q", want)
			}
			if line == want {
				return
			}
		case <-deadline:
			t.Fatalf("server never printed %q", want)
		}
	}
}

// kill ends the server with SIGKILL: its sockets close without a word.
func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.cmd.Wait()
}
