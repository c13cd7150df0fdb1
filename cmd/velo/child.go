package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// greeterProc is the parent's handle on the greeter process: its stdin,
// whose close asks it to stop, and the lines it prints.
type greeterProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // the greeter's stdout, line by line; closed at its end
	exited chan struct{} // closed once the process has exited and waitErr is set
	// waitErr is the process's exit: nil for status 0.
	waitErr error
}

// startGreeter starts this binary again as the greeter of the discovery
// folder dir. Its stderr goes to ours, so a failure says why.
func startGreeter(dir string) (*greeterProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "demo", "--serve-greeter", dir)
	cmd.Stderr = os.Stderr
	p := &greeterProc{cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
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
	go p.read(stdout)
	return p, nil
}

// read passes the greeter's lines on, then reaps the process: Wait may
// run only once its stdout has been read to the end.
func (p *greeterProc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		p.lines <- sc.Text()
	}
	close(p.lines)
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// ready waits for the greeter's first line, which it prints once its
// service is registered.
func (p *greeterProc) ready(ctx context.Context) (string, error) {
	select {
	case line, ok := <-p.lines:
		if ok {
			return line, nil
		}
		<-p.exited
		return "", fmt.Errorf("the greeter process ended before it was ready: %v", p.waitErr)
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the greeter process: %w", ctx.Err())
	}
}

// stop closes the greeter's stdin, which asks it to withdraw its entries
// and shut down, and returns the lines it printed on the way out. A
// greeter that is not gone within d is killed. Calling stop again is safe.
func (p *greeterProc) stop(d time.Duration) ([]string, error) {
	p.stdin.Close()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var rest []string
	var killed error
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				rest = append(rest, line)
				continue
			}
			<-p.exited
			return rest, errors.Join(killed, p.waitErr)
		case <-timer.C:
			// Go on reading: the reader must reach the end of stdout
			// before it reaps the process.
			p.cmd.Process.Kill()
			killed = errors.New("the greeter process did not stop in time; killed it")
		}
	}
}
