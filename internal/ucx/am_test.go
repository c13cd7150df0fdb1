//go:build ucx

package ucx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

type msg struct{ header, data []byte }

// collect registers a handler on w for id that copies every message out.
func collect(w *Worker, id uint16, n int) chan msg {
	ch := make(chan msg, n)
	w.SetAMHandler(id, func(h, d []byte) {
		ch <- msg{bytes.Clone(h), bytes.Clone(d)}
	})
	return ch
}

// pattern is n bytes that differ with seed.
func pattern(n int, seed uint64) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func TestAMRoundTrip(t *testing.T) {
	p := newPair(t)
	got := collect(p.b, 7, 1)
	echo := collect(p.a, 8, 1)
	// b echoes what it gets back to a, from its handler.
	p.b.SetAMHandler(9, func(h, d []byte) {
		if err := p.b.SendAM(p.ba, 8, bytes.Clone(h), bytes.Clone(d), nil); err != nil {
			t.Errorf("echo: %v", err)
		}
	})
	for _, n := range []int{0, 1, 64 << 10, 1 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			header := []byte(fmt.Sprintf("hdr-%d", n))
			data := pattern(n, uint64(n))
			done := make(chan error, 1)
			if err := p.a.SendAM(p.ab, 7, header, data, func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, done, "send done"); err != nil {
				t.Fatal(err)
			}
			m := wait(t, got, "message")
			if !bytes.Equal(m.header, header) || !bytes.Equal(m.data, data) {
				t.Fatalf("got %d+%d bytes, not what was sent", len(m.header), len(m.data))
			}
			if err := p.a.SendAM(p.ab, 9, header, data, nil); err != nil {
				t.Fatal(err)
			}
			m = wait(t, echo, "echo")
			if !bytes.Equal(m.header, header) || !bytes.Equal(m.data, data) {
				t.Fatalf("echo: got %d+%d bytes, not what was sent", len(m.header), len(m.data))
			}
		})
	}
	if s := p.b.Stats(); s.RndvRefused != 0 {
		t.Fatalf("eager sends arrived in rendezvous mode: %+v", s)
	}
}

// TestAMOrderPerEndpoint: many goroutines send concurrently; each one's
// messages arrive in its order.
func TestAMOrderPerEndpoint(t *testing.T) {
	p := newPair(t)
	const senders, each = 8, 300
	got := collect(p.b, 1, senders*each)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				h := []byte{byte(s), byte(i >> 8), byte(i)}
				if err := p.a.SendAM(p.ab, 1, h, pattern(i%97, uint64(i)), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := make([]int, senders)
	for range senders * each {
		m := wait(t, got, "message")
		s, i := int(m.header[0]), int(m.header[1])<<8|int(m.header[2])
		if i != next[s] {
			t.Fatalf("sender %d: got message %d, want %d", s, i, next[s])
		}
		if !bytes.Equal(m.data, pattern(i%97, uint64(i))) {
			t.Fatalf("sender %d message %d: payload differs", s, i)
		}
		next[s]++
	}
}

func TestSendAMRefusals(t *testing.T) {
	p := newPair(t)
	if err := p.a.SendAM(p.ab, 1, make([]byte, p.a.MaxAMHeader()+1), nil, nil); !errors.Is(err, ErrSendFailed) {
		t.Fatalf("oversize header: %v", err)
	}
	done := make(chan error, 1)
	if err := p.a.SendAM(12345, 1, nil, nil, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done, "done"); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("unknown endpoint: %v", err)
	}
}
