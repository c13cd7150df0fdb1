package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/velo-go/velo/ext"
)

// Spawn makes the command that starts this binary again; the case adds
// RoleEnv to its environment. Tests re-run the test binary
// (os.Args[0] -test.run=^$), the harness runs `velo-bench hostile`.
type Spawn func() *exec.Cmd

// proc is a running node process and its control channel.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	hello hello

	mu      sync.Mutex
	waiting map[uint64]chan reply
	nextID  atomic.Uint64
	exited  chan struct{} // closed when the process has exited
	exitErr error
	stderr  *tailBuffer
	hung    atomic.Pointer[string] // the first command it did not answer in time
}

// ErrNodeDied is returned by a command to a node process that has exited.
var ErrNodeDied = errors.New("hostile: the node process exited")

// ErrUnresponsive is returned by a command a node did not answer within
// opTimeout: its control channel stopped answering, which the issue
// counts as harm (a node's debug endpoint stopped answering).
var ErrUnresponsive = errors.New("hostile: the node stopped answering its control channel")

// opTimeout bounds every command; the slowest ones wait 3 s for streams.
const opTimeout = 15 * time.Second

// startProc starts a node process and waits for its hello.
func startProc(ctx context.Context, spawn Spawn, name string, echo io.Writer) (*proc, error) {
	cmd := spawn()
	// Under -race the detector sleeps a second at exit unless told not to
	// (atexit_sleep_ms); every case stops two nodes.
	cmd.Env = append(os.Environ(), RoleEnv+"=node", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	p := &proc{name: name, cmd: cmd, waiting: map[uint64]chan reply{}, exited: make(chan struct{}), stderr: &tailBuffer{max: 8 << 20}}
	if echo != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, prefixWriter(echo, name+": "))
	} else {
		cmd.Stderr = p.stderr
	}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	first := make(chan reply, 1)
	go p.read(stdout, first)
	select {
	case r := <-first:
		if err := json.Unmarshal(r.Data, &p.hello); err != nil {
			p.kill()
			return nil, fmt.Errorf("%s hello: %w", name, err)
		}
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before its hello: %v\n%s", name, p.exitErr, p.stderr.String())
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("%s did not start: %w", name, ctx.Err())
	}
}

// read dispatches the replies; the first one is the hello.
func (p *proc) read(stdout io.Reader, first chan<- reply) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	gotHello := false
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // a stray line
		}
		if !gotHello {
			gotHello = true
			first <- r
			continue
		}
		p.mu.Lock()
		ch := p.waiting[r.ID]
		delete(p.waiting, r.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	p.exitErr = p.cmd.Wait()
	close(p.exited)
}

// do runs one command and decodes its answer into out (which may be nil).
func (p *proc) do(ctx context.Context, op string, args, out any) error {
	id := p.nextID.Add(1)
	c := command{ID: id, Op: op}
	if args != nil {
		c.Args = mustJSON(args)
	}
	ch := make(chan reply, 1)
	p.mu.Lock()
	p.waiting[id] = ch
	p.mu.Unlock()
	line := append(mustJSON(c), '\n')
	if _, err := p.stdin.Write(line); err != nil {
		return p.died(err)
	}
	timeout := time.NewTimer(opTimeout)
	defer timeout.Stop()
	select {
	case <-timeout.C:
		p.hung.CompareAndSwap(nil, &op)
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
		return fmt.Errorf("%w: %s did not answer %s within %v", ErrUnresponsive, p.name, op, opTimeout)
	case r := <-ch:
		if r.Err != "" {
			return fmt.Errorf("%s %s: %s", p.name, op, r.Err)
		}
		if out != nil && len(r.Data) > 0 {
			return json.Unmarshal(r.Data, out)
		}
		return nil
	case <-p.exited:
		return p.died(nil)
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
		return fmt.Errorf("%s %s: %w", p.name, op, ctx.Err())
	}
}

func (p *proc) died(err error) error {
	select {
	case <-p.exited:
		return fmt.Errorf("%w (%s: %v)", ErrNodeDied, p.name, p.exitErr)
	case <-time.After(time.Second):
		return fmt.Errorf("%s: %v", p.name, err)
	}
}

// alive says whether the process still runs.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// deathNote is the last line of the process's stderr that says why it
// died (a Go fatal error starts with "fatal error:"), or its exit status.
func (p *proc) deathNote() string {
	s := p.stderr.String()
	for _, l := range bytes.Split([]byte(s), []byte("\n")) {
		if bytes.HasPrefix(l, []byte("fatal error:")) || bytes.HasPrefix(l, []byte("panic:")) {
			return string(l)
		}
	}
	return fmt.Sprint(p.exitErr)
}

// stop closes stdin (the node exits) and kills it if it has not gone
// within a second.
func (p *proc) stop() (killed bool) {
	p.stdin.Close()
	select {
	case <-p.exited:
		return false
	case <-time.After(time.Second):
		p.kill()
		return true
	}
}

// dump makes the node print its goroutines and exit (SIGQUIT), and writes
// what it printed to a file in dir; it returns the file's path.
func (p *proc) dump(dir, tag string) string {
	if !p.alive() {
		return ""
	}
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.kill()
	}
	f, err := os.CreateTemp(dir, "velo-hostile-"+tag+"-"+p.name+"-*.txt")
	if err != nil {
		return ""
	}
	defer f.Close()
	f.WriteString(p.stderr.String())
	return f.Name()
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

func (p *proc) info() ext.PeerInfo   { return p.hello.PeerInfo }
func (p *proc) worker() ext.WorkerID { return ext.WorkerID(p.hello.WorkerID) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// prefixWriter writes what it gets to w behind prefix (for watching a
// node's stderr live; a write may hold part of a line).
func prefixWriter(w io.Writer, prefix string) io.Writer { return &prefixed{w, prefix} }

type prefixed struct {
	w      io.Writer
	prefix string
}

func (p *prefixed) Write(b []byte) (int, error) {
	fmt.Fprintf(p.w, "%s%s", p.prefix, b)
	return len(b), nil
}
