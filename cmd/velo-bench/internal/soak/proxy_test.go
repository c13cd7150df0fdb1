package soak

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every connection until closed.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func proxied(t *testing.T) (*Proxy, net.Conn) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	echo(t, c, "hello")
	// The echo can reach the client before the proxy counts it.
	until(t, "the hello counted both ways", func() bool { return p.Forwarded.Load() == 10 })
	return p, c
}

// echo writes s and reads it back.
func echo(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(s))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != s {
		t.Fatalf("echo %q: %q %v", s, buf, err)
	}
}

// until polls cond: the proxy's counters are the signal.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func TestProxyDropClosesWithFIN(t *testing.T) {
	p, c := proxied(t)
	if n := p.Drop(); n != 1 {
		t.Fatalf("dropped %d connections, want 1", n)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after drop: %v, want EOF", err)
	}
}

func TestProxyResetSendsRST(t *testing.T) {
	p, c := proxied(t)
	if n := p.Reset(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after reset: %v, want ECONNRESET", err)
	}
}

func TestProxyPauseHoldsThenForwards(t *testing.T) {
	p, c := proxied(t)
	before := p.Forwarded.Load()
	p.Pause()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	until(t, "the write parked", func() bool { return p.Parked.Load() == 1 })
	if got := p.Forwarded.Load(); got != before {
		t.Fatalf("forwarded %d bytes during a pause", got-before)
	}
	p.Resume()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after resume: %q %v", buf, err)
	}
	echo(t, c, "again") // the connection survived
}

func TestProxyBlackholeDiscardsThenCloses(t *testing.T) {
	p, c := proxied(t)
	before := p.Forwarded.Load()
	p.Blackhole()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	// A connection made during the hole is taken and read too.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("also")); err != nil {
		t.Fatal(err)
	}
	until(t, "both writes discarded", func() bool { return p.Discarded.Load() == 8 })
	if got := p.Forwarded.Load(); got != before {
		t.Fatalf("forwarded %d bytes into a blackhole", got-before)
	}
	if n := p.Unhole(); n != 2 {
		t.Fatalf("unhole closed %d connections, want 2", n)
	}
	for _, cc := range []net.Conn{c, c2} {
		if _, err := cc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("read after unhole: %v, want EOF", err)
		}
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	echo(t, c3, "back") // new connections forward again
}

func TestPlanIsSeeded(t *testing.T) {
	a, b := Plan(7, 50, 2, time.Second, nil), Plan(7, 50, 2, time.Second, nil)
	seen := map[FaultKind]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fault %d differs: %+v %+v", i, a[i], b[i])
		}
		seen[a[i].Kind] = true
	}
	if len(seen) != 4 {
		t.Fatalf("50 faults drew only %v", seen)
	}
	for _, f := range Plan(7, 20, 2, time.Second, []FaultKind{FaultPause}) {
		if f.Kind != FaultPause {
			t.Fatalf("kinds not honoured: %v", f.Kind)
		}
	}
}
