//go:build ucx

package ucx

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// lossBound is how soon a lost peer fails outstanding and new operations:
// over tcp a dead peer's sockets close at once and the worker fd wakes the
// progress thread.
const lossBound = time.Second

// isLoss reports whether err is how an operation to a lost peer ends.
func isLoss(err error) bool {
	return errors.Is(err, ErrEndpointFailed) || errors.Is(err, ErrClosed)
}

// streamOps keeps GETs and sends going to ep until stop, and reports the
// first error of each.
func streamOps(w *Worker, ep EndpointID, addr uint64, key []byte, stop <-chan struct{}) (gets, sends <-chan error, served *int64, mu *sync.Mutex) {
	g, s := make(chan error, 1), make(chan error, 1)
	var n int64
	var m sync.Mutex
	go func() {
		dst := make([]byte, 256<<10)
		for {
			select {
			case <-stop:
				g <- nil
				return
			default:
			}
			if err := w.Get(context.Background(), ep, addr, key, dst); err != nil {
				g <- err
				return
			}
			m.Lock()
			n++
			m.Unlock()
		}
	}()
	go func() {
		var once sync.Once
		data := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				once.Do(func() { s <- nil })
				return
			default:
			}
			done := make(chan error, 1)
			if err := w.SendAM(ep, 4, nil, data, func(err error) { done <- err }); err != nil {
				once.Do(func() { s <- err })
				return
			}
			if err := <-done; err != nil {
				once.Do(func() { s <- err })
				return
			}
		}
	}()
	return g, s, &n, &m
}

// checkLoss waits for the streams to fail after the peer was lost at t0,
// then checks that new operations fail too.
func checkLoss(t *testing.T, w *Worker, ep EndpointID, addr uint64, key []byte, gets, sends <-chan error, reported <-chan error, t0 time.Time) {
	t.Helper()
	for name, ch := range map[string]<-chan error{"GET": gets, "send": sends, "OnEndpointError": reported} {
		err := wait(t, ch, name)
		if !isLoss(err) {
			t.Errorf("%s after the peer was lost: %v", name, err)
		}
		if d := time.Since(t0); d > lossBound {
			t.Errorf("%s failed %v after the peer was lost, over %v", name, d, lossBound)
		}
		t.Logf("%s failed %v after the loss: %v", name, time.Since(t0).Round(time.Microsecond), err)
	}
	if err := w.Get(context.Background(), ep, addr, key, make([]byte, 8)); !errors.Is(err, ErrEndpointFailed) {
		t.Errorf("a new GET on the failed endpoint: %v", err)
	}
	done := make(chan error, 1)
	if err := w.SendAM(ep, 4, nil, nil, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done, "a new send"); !errors.Is(err, ErrEndpointFailed) {
		t.Errorf("a new send on the failed endpoint: %v", err)
	}
}

// reportTo collects the first endpoint error w reports for ep.
func reportTo(w *Worker, ep *EndpointID) <-chan error {
	ch := make(chan error, 1)
	w.OnEndpointError(func(e EndpointID, err error) {
		if e == *ep {
			select {
			case ch <- err:
			default:
			}
		}
	})
	return ch
}

// TestPeerClosedFailsOps: b's Close, with GETs and sends from a running,
// fails a's outstanding and new operations on its endpoint to b.
func TestPeerClosedFailsOps(t *testing.T) {
	needPeerErrors(t)
	a, b := newWorker(t), newWorker(t)
	b.SetAMHandler(4, func(h, d []byte) {})
	var ab EndpointID
	reported := reportTo(a, &ab)
	var err error
	if ab, err = a.Connect(b.Address()); err != nil {
		t.Fatal(err)
	}
	m, _, key := mapped(t, b, 1<<20)
	stop := make(chan struct{})
	defer close(stop)
	gets, sends, served, mu := streamOps(a, ab, m.Addr(), key, stop)
	waitUntil(t, "GETs to flow", func() bool { mu.Lock(); defer mu.Unlock(); return *served > 3 })
	t0 := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	checkLoss(t, a, ab, m.Addr(), key, gets, sends, reported, t0)
}

// The child process of TestPeerKilledFailsOps: a worker with a mapped
// region, its address and key on stdout, alive until killed.
const childEnv = "VELO_UCX_TEST_CHILD"

func init() {
	childRole = func() bool {
		if os.Getenv(childEnv) == "" {
			return false
		}
		runChild()
		return true
	}
}

func runChild() {
	w, err := NewWorker(Config{TLS: "tcp", NoPeerErrors: shmOnly()})
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	buf := make([]byte, 4<<20)
	m, err := w.Map(unsafe.Pointer(&buf[0]), len(buf))
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	key, _ := m.PackRkey()
	w.SetAMHandler(4, func(h, d []byte) {})
	fmt.Printf("CHILD %x %x %d\n", w.Address(), key, m.Addr())
	// Live until the parent kills us (or goes away).
	_, _ = bufio.NewReader(os.Stdin).ReadByte()
}

// TestPeerKilledFailsOps: a second process, killed mid-stream, fails the
// survivor's outstanding and new operations.
func TestPeerKilledFailsOps(t *testing.T) {
	needPeerErrors(t)
	c := startChild(t)
	addr, key, raddr := c.addr, c.key, c.raddr

	a := newWorker(t)
	var ep EndpointID
	reported := reportTo(a, &ep)
	var err error
	if ep, err = a.Connect(addr); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	gets, sends, served, mu := streamOps(a, ep, raddr, key, stop)
	waitUntil(t, "GETs to flow", func() bool { mu.Lock(); defer mu.Unlock(); return *served > 3 })
	t0 := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	checkLoss(t, a, ep, raddr, key, gets, sends, reported, t0)
}

// child is a worker in a second process (runChild): its address, the
// key and address of its 4 MiB region.
type child struct {
	cmd   *exec.Cmd
	addr  []byte
	key   []byte
	raddr uint64
}

// startChild starts a child process, killed when the test ends.
func startChild(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := &child{cmd: cmd}
	c.addr, c.key, c.raddr = readChild(t, out)
	return c
}

// readChild reads the child's address, key and region address.
func readChild(t *testing.T, out interface{ Read([]byte) (int, error) }) ([]byte, []byte, uint64) {
	t.Helper()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "ERR":
			t.Fatalf("child: %s", sc.Text())
		case "CHILD":
			addr, err1 := hex.DecodeString(f[1])
			key, err2 := hex.DecodeString(f[2])
			raddr, err3 := strconv.ParseUint(f[3], 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			return addr, key, raddr
		}
	}
	t.Fatalf("child ended without its address: %v", sc.Err())
	return nil, nil, 0
}
