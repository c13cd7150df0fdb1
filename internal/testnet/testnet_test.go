package testnet

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// pair dials a fresh listener of b from a and returns both ends.
func pair(t *testing.T, a, b *Host) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := b.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	c, err := a.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c, <-got
}

func TestDialRefusedAndAddrs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		a, b := n.Host(), n.Host()
		if _, err := a.Dial(context.Background(), "127.0.0.1:1"); !errors.Is(err, ErrRefused) {
			t.Fatalf("dial to nothing: %v, want ErrRefused", err)
		}
		c, s := pair(t, a, b)
		defer c.Close()
		defer s.Close()
		if c.RemoteAddr().String() != s.LocalAddr().String() || s.RemoteAddr().String() != c.LocalAddr().String() {
			t.Fatalf("addresses do not match: %v→%v, %v←%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
		}
	})
}

// TestHoldAndRelease: a held write waits, on the bubble's clock, until
// Release; closing its connection ends it too.
func TestHoldAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		a, b := n.Host(), n.Host()
		c, s := pair(t, a, b)
		defer s.Close()
		n.Hold(c.RemoteAddr().String())
		wrote := make(chan error, 1)
		go func() { _, err := c.Write([]byte("x")); wrote <- err }()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case err := <-wrote:
			t.Fatalf("a held write returned: %v", err)
		default:
		}
		n.Release()
		buf := make([]byte, 1)
		if _, err := io.ReadFull(s, buf); err != nil || buf[0] != 'x' {
			t.Fatalf("read %q, %v", buf, err)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		n.Hold(c.RemoteAddr().String())
		go func() { _, err := c.Write([]byte("y")); wrote <- err }()
		synctest.Wait()
		c.Close()
		if err := <-wrote; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a held write on a closed connection: %v", err)
		}
	})
}

// TestKill: a killed host's connections end at once for its peers, and
// it listens and dials no more.
func TestKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		a, b := n.Host(), n.Host()
		c, s := pair(t, a, b)
		defer c.Close()
		ln, err := b.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		b.Kill()
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read from a killed peer: %v, want io.EOF", err)
		}
		if _, err := s.Write([]byte("x")); err == nil {
			t.Fatal("the killed end still writes")
		}
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept on a killed host: %v", err)
		}
		if _, err := b.Listen(""); err == nil {
			t.Fatal("a killed host listens")
		}
		if _, err := a.Dial(context.Background(), ln.Addr().String()); !errors.Is(err, ErrRefused) {
			t.Fatalf("dial to a killed host: %v, want ErrRefused", err)
		}
	})
}
