package streaming

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// mpscOverMux attaches an MPSC producer from node p and checks that it
// took the mux.
func mpscOverMux(t *testing.T, p *remoteNode, an *MPSCAnchor[[]byte]) *MPSCSender[[]byte] {
	t.Helper()
	s := attachMPSCRemoteT(t, p, an.Handle())
	if s.slot() == nil {
		t.Fatal("the MPSC producer did not negotiate the mux")
	}
	return s
}

// TestMuxMPSC: producers on two nodes stream into one MPSC anchor over the
// mux, past their credit window, each in order and tagged with its
// SenderID; one detaches and one closes, and neither ends the stream.
func TestMuxMPSC(t *testing.T) {
	consumer := newRemoteNode(t, muxOn)
	p1, p2 := newRemoteNode(t, muxOn), newRemoteNode(t, muxOn)
	knows(t, consumer, p1, p2)
	an := newMPSC(t, consumer.sm)
	senders := []*MPSCSender[[]byte]{mpscOverMux(t, p1, an), mpscOverMux(t, p2, an)}
	const n = 300 // many times the credit window: credit must come back
	var wg sync.WaitGroup
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				if err := s.Send(context.Background(), fmt.Appendf(nil, "%d:%d", s.SenderID(), k)); err != nil {
					t.Errorf("send %d: %v", k, err)
					return
				}
			}
			if i == 0 {
				s.Detach()
			} else {
				s.Close()
			}
		}()
	}
	next := map[SenderID]int{}
	ends := map[MPSCKind]int{}
	for len(ends) < 2 {
		f := nextFrameWithin(t, an, 10*time.Second)
		switch f.Kind {
		case MPSCItem:
			if want := fmt.Sprintf("%d:%d", f.Sender, next[f.Sender]); string(f.Item) != want {
				t.Fatalf("item %q from %v, want %q", f.Item, f.Sender, want)
			}
			next[f.Sender]++
		case MPSCDetached, MPSCDropped:
			if next[f.Sender] != n {
				t.Fatalf("%v ended (%v) after %d items, want %d", f.Sender, f.Kind, next[f.Sender], n)
			}
			ends[f.Kind]++
		default:
			t.Fatalf("unexpected frame %v (%v)", f.Kind, f.Err)
		}
	}
	wg.Wait()
	// The stream goes on: a third producer can still attach and send.
	s3 := mpscOverMux(t, p1, an)
	if err := s3.Send(context.Background(), []byte("late")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || string(f.Item) != "late" {
		t.Fatalf("after two producers ended: %v %q", f.Kind, f.Item)
	}
}

// TestMuxMPSCStopAndCancel: the consumer's RequestStop reaches a producer
// over the mux (Stopped, and its last item still arrives), and its Cancel
// reaches another, idle one (Cancelled; sends fail).
func TestMuxMPSCStopAndCancel(t *testing.T) {
	consumer, producer := newRemoteNode(t, muxOn), newRemoteNode(t, muxOn)
	knows(t, consumer, producer)
	an := newMPSC(t, consumer.sm)
	s := mpscOverMux(t, producer, an)
	idle := mpscOverMux(t, producer, an)
	an.Controller().RequestStop()
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("the stop did not reach the producer over the mux")
	}
	if err := s.Send(context.Background(), []byte("last")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || string(f.Item) != "last" {
		t.Fatalf("after the stop: %v %q", f.Kind, f.Item)
	}
	an.Controller().Cancel()
	for _, p := range []*MPSCSender[[]byte]{s, idle} {
		select {
		case <-p.Cancelled():
		case <-time.After(5 * time.Second):
			t.Fatal("the cancel did not reach a producer over the mux")
		}
	}
	if err := idle.Send(context.Background(), []byte("x")); err == nil {
		t.Fatal("a send after the cancel succeeded")
	}
}

// TestMuxMPSCProducerNodeDies: one producer's node goes away; that
// producer ends as MPSCDropped and the other goes on.
func TestMuxMPSCProducerNodeDies(t *testing.T) {
	consumer := newRemoteNode(t, muxOn)
	doomed, tr := killableNode(t)
	survivor := newRemoteNode(t, muxOn)
	knows(t, consumer, doomed, survivor)
	an := newMPSC(t, consumer.sm)
	d := mpscOverMux(t, doomed, an)
	s := mpscOverMux(t, survivor, an)
	if err := d.Send(context.Background(), []byte("d")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem {
		t.Fatalf("first frame %v", f.Kind)
	}
	killed := time.Now()
	tr.Shutdown()
	f := nextFrameWithin(t, an, 5*time.Second)
	if f.Kind != MPSCDropped || f.Sender != d.SenderID() {
		t.Fatalf("after the node died: %v from %v, want MPSCDropped from %v", f.Kind, f.Sender, d.SenderID())
	}
	t.Logf("the dead node's producer ended %v after the close", time.Since(killed))
	if err := s.Send(context.Background(), []byte("alive")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || string(f.Item) != "alive" {
		t.Fatalf("the survivor: %v %q", f.Kind, f.Item)
	}
}

// A mux-only owner takes MPSC producers over the mux.
func TestMuxOnlyMPSC(t *testing.T) {
	consumer, producer := newRemoteNode(t, muxOn, WithMuxOnly()), newRemoteNode(t, muxOn)
	knows(t, consumer, producer)
	an := newMPSC(t, consumer.sm)
	s := mpscOverMux(t, producer, an)
	if err := s.Send(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem {
		t.Fatalf("got %v", f.Kind)
	}
}
