package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The driver's end of the children (the protocol is in proto.go): this
// binary again, started with ChildFlag, which dies with the driver
// (Pdeathsig) so a killed run leaves none behind.

// ChildFlag is the hidden flag that makes `velo-bench soak` a child.
const ChildFlag = "--soak-child"

type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan msg
	exited chan struct{}
	// exitErr is the child's exit status, once exited is closed.
	exitErr error
	// leaving is set once the driver said exit: the exit is no failure.
	leaving atomic.Bool

	tickMu sync.Mutex
	tick   Tick
	ticked bool
}

func startProc(ctx context.Context, name string, spawn func([]string) *exec.Cmd, fail context.CancelCauseFunc) (*proc, error) {
	var cmd *exec.Cmd
	if spawn != nil {
		cmd = spawn([]string{ChildFlag})
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(exe, "soak", ChildFlag)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childProcAttr()
	p := &proc{name: name, cmd: cmd, msgs: make(chan msg, 64), exited: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go p.read(stdout, fail)
	return p, nil
}

// read hands the child's lines to p.msgs (its samples to p.tick); an
// error line or an early exit fails the run.
func (p *proc) read(stdout io.Reader, fail context.CancelCauseFunc) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 512<<20)
	for sc.Scan() {
		var m msg
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Op == "" {
			continue
		}
		switch m.Op {
		case "error":
			fail(fmt.Errorf("%s: %s", p.name, m.Err))
		case "sample":
			if m.Sample == nil {
				fail(fmt.Errorf("%s: a sample without figures", p.name))
				continue
			}
			p.tickMu.Lock()
			p.tick, p.ticked = *m.Sample, true
			p.tickMu.Unlock()
		default:
			p.msgs <- m
		}
	}
	p.exitErr = p.cmd.Wait()
	close(p.exited)
	if !p.leaving.Load() {
		fail(fmt.Errorf("%s exited early: %v", p.name, p.exitErr))
	}
}

func (p *proc) lastTick() (Tick, bool) {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	return p.tick, p.ticked
}

func (p *proc) send(m msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		// A broken pipe most likely means the child is gone: say so.
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited early: %v", p.name, p.exitErr)
		case <-time.After(time.Second):
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

func (p *proc) recv(ctx context.Context, op string) (msg, error) {
	select {
	case m := <-p.msgs:
		if m.Op != op {
			return m, fmt.Errorf("%s said %q, want %q", p.name, m.Op, op)
		}
		return m, nil
	case <-ctx.Done():
		return msg{}, fmt.Errorf("%s: waiting for %s: %w", p.name, op, context.Cause(ctx))
	}
}

// rss reads the child's resident set from /proc; 0 where there is none.
func (p *proc) rss() int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// kill ends a child that is still running.
func (p *proc) kill() {
	p.leaving.Store(true)
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}
