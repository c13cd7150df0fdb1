package ext_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// countingOwner is a pooled buffer that counts what is done with it.
type countingOwner struct {
	retains, releases atomic.Int32
}

func (o *countingOwner) Retain()  { o.retains.Add(1) }
func (o *countingOwner) Release() { o.releases.Add(1) }

func ownedRun(n int) ([]ext.Frame, []*countingOwner) {
	frames := make([]ext.Frame, n)
	owners := make([]*countingOwner, n)
	for i := range frames {
		owners[i] = &countingOwner{}
		frames[i] = request(i)
		frames[i].Owner = owners[i]
	}
	return frames, owners
}

func releases(owners []*countingOwner) []int32 {
	out := make([]int32, len(owners))
	for i, o := range owners {
		out[i] = o.releases.Load()
	}
	return out
}

func TestFrameReleaseAndLen(t *testing.T) {
	ext.Frame{}.Release() // no owner: nothing happens
	o := &countingOwner{}
	f := ext.Frame{Type: ext.Event, Header: []byte("abc"), Payload: []byte("defgh"), Owner: o}
	if f.Len() != 8 {
		t.Fatalf("Len = %d, want 8", f.Len())
	}
	f.Release()
	if o.releases.Load() != 1 || o.retains.Load() != 0 {
		t.Fatalf("Release: releases %d, retains %d", o.releases.Load(), o.retains.Load())
	}
}

// Done gives back both the in-flight unit and the frame's memory, once each.
func TestInboundMessageDoneReleasesGuardAndFrame(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	o := &countingOwner{}
	f := request(1)
	f.Owner = o
	if got := a.AdmitMessage(f); got != ext.Admitted {
		t.Fatalf("AdmitMessage = %v", got)
	}
	if o.releases.Load() != 0 {
		t.Fatal("admission released the frame")
	}
	m, err := a.Messages().Pop(generous(t))
	if err != nil {
		t.Fatal(err)
	}
	m.Done()
	if s.InFlight() != 0 || o.releases.Load() != 1 {
		t.Fatalf("after Done: InFlight %d, frame releases %d; want 0, 1", s.InFlight(), o.releases.Load())
	}
}

// Close drops the queued requests: each frame is released once and each
// guard given back, so a later drain finishes.
func TestAdapterCloseReleasesQueuedFrames(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	frames, owners := ownedRun(4)
	for _, f := range frames {
		if got := a.AdmitMessage(f); got != ext.Admitted {
			t.Fatalf("AdmitMessage = %v", got)
		}
	}
	a.Close()
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("frame releases after Close = %v, want one each", got)
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight after Close = %d", s.InFlight())
	}
	a.Close()
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("second Close released again: %v", got)
	}
}

func TestAdmitMessagesAdmitsARunInOrder(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	frames, owners := ownedRun(5)
	if got := a.AdmitMessages(frames); got != ext.Admitted {
		t.Fatalf("AdmitMessages = %v", got)
	}
	if s.InFlight() != 5 {
		t.Fatalf("InFlight = %d, want 5", s.InFlight())
	}
	// A single message after the run keeps the order.
	if got := a.AdmitMessage(request(5)); got != ext.Admitted {
		t.Fatalf("AdmitMessage = %v", got)
	}
	batch, err := a.Messages().PopAll(generous(t), nil)
	if err != nil || len(batch) != 6 {
		t.Fatalf("PopAll = %d, %v", len(batch), err)
	}
	for i, m := range batch {
		if string(m.Header) != fmt.Sprintf("h%d", i) || m.Type != ext.Message {
			t.Fatalf("message %d is %q", i, m.Header)
		}
	}
	// Each message holds exactly one unit.
	for i, m := range batch {
		m.Done()
		if got, want := s.InFlight(), int64(5-i); got != want {
			t.Fatalf("after Done of %d: InFlight %d, want %d", i, got, want)
		}
	}
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1 1]" {
		t.Fatalf("frame releases = %v", got)
	}
}

// A queued run holds the drain open exactly as single messages do.
func TestQueuedRunHoldsDrain(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	frames, _ := ownedRun(3)
	if got := a.AdmitMessages(frames); got != ext.Admitted {
		t.Fatalf("AdmitMessages = %v", got)
	}
	s.BeginDrain()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := s.WaitForDrain(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForDrain with a queued run = %v, want DeadlineExceeded", err)
	}
	drained := make(chan error, 1)
	go func() { drained <- s.WaitForDrain(generous(t)) }()
	batch, err := a.Messages().PopAll(generous(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range batch[:2] {
		m.Done()
	}
	if closedNow(drained) {
		t.Fatal("drain finished with one message of the run unfinished")
	}
	batch[2].Done()
	if err := recv(t, "the drain", drained); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
}

// During a drain the whole run is refused, the count does not move, and
// the frames stay the caller's (to echo their headers): none is released.
func TestAdmitMessagesRefusesRunDuringDrain(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	s.BeginDrain()
	frames, owners := ownedRun(4)
	if got := a.AdmitMessages(frames); got != ext.Draining {
		t.Fatalf("AdmitMessages during drain = %v, want Draining", got)
	}
	if s.InFlight() != 0 || a.Messages().Len() != 0 {
		t.Fatalf("refused run: InFlight %d, queued %d", s.InFlight(), a.Messages().Len())
	}
	if got := releases(owners); fmt.Sprint(got) != "[0 0 0 0]" {
		t.Fatalf("refused run released frames %v; the caller still needs them", got)
	}
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
}

// After Close the run is Disconnected: nothing stays counted and every
// frame is released once.
func TestAdmitMessagesDisconnectedAfterClose(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{})
	a.Close()
	frames, owners := ownedRun(3)
	if got := a.AdmitMessages(frames); got != ext.Disconnected {
		t.Fatalf("AdmitMessages after Close = %v, want Disconnected", got)
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after a Disconnected run", s.InFlight())
	}
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1]" {
		t.Fatalf("frame releases = %v, want one each", got)
	}
}

// A run longer than the queue goes in as room frees, in order.
func TestAdmitMessagesRunLongerThanQueue(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 2})
	frames, owners := ownedRun(7)
	result := make(chan ext.AdmitOutcome, 1)
	go func() { result <- a.AdmitMessages(frames) }()

	next := 0
	for next < len(frames) {
		batch, err := a.Messages().PopAll(generous(t), nil)
		if err != nil {
			t.Fatalf("PopAll: %v", err)
		}
		if len(batch) > 2 {
			t.Fatalf("batch of %d from a queue of 2", len(batch))
		}
		for _, m := range batch {
			if string(m.Header) != fmt.Sprintf("h%d", next) {
				t.Fatalf("got %q, want h%d", m.Header, next)
			}
			next++
			m.Done()
		}
	}
	if got := recv(t, "the run", result); got != ext.Admitted {
		t.Fatalf("AdmitMessages = %v", got)
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d", s.InFlight())
	}
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1 1 1 1]" {
		t.Fatalf("frame releases = %v", got)
	}
}

// Close while a run is parked half in: the queued part is dropped by Close,
// the rest by AdmitMessages, and every unit and frame is given back once.
func TestAdmitMessagesCloseWhileParked(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 2})
	frames, owners := ownedRun(5)
	result := make(chan ext.AdmitOutcome, 1)
	go func() { result <- a.AdmitMessages(frames) }()
	waitUntil(t, "the run parks on the full queue", a.Messages().ProducerWaiting)
	if s.InFlight() != 5 {
		t.Fatalf("InFlight = %d while the run is parked, want 5", s.InFlight())
	}
	s.BeginDrain()
	a.Close()
	if got := recv(t, "the parked run", result); got != ext.Disconnected {
		t.Fatalf("AdmitMessages after Close = %v, want Disconnected", got)
	}
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1 1]" {
		t.Fatalf("frame releases = %v, want one each", got)
	}
}

// Some of the run handled by a consumer, then Close: each unit and frame
// is still given back exactly once (the consumer's by Done).
func TestAdmitMessagesCloseAfterPartialConsumption(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 2})
	frames, owners := ownedRun(6)
	result := make(chan ext.AdmitOutcome, 1)
	go func() { result <- a.AdmitMessages(frames) }()
	waitUntil(t, "the run parks", a.Messages().ProducerWaiting)
	first, err := a.Messages().PopAll(generous(t), nil) // frees room: two more go in
	if err != nil || len(first) != 2 {
		t.Fatalf("PopAll = %d, %v", len(first), err)
	}
	waitUntil(t, "the run parks again", func() bool {
		return a.Messages().Len() == 2 && a.Messages().ProducerWaiting()
	})
	a.Close()
	if got := recv(t, "the run", result); got != ext.Disconnected {
		t.Fatalf("AdmitMessages = %v", got)
	}
	if got := s.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d, want 2 (the consumer's two)", got)
	}
	for _, m := range first {
		m.Done()
	}
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d", s.InFlight())
	}
	if got := releases(owners); fmt.Sprint(got) != "[1 1 1 1 1 1]" {
		t.Fatalf("frame releases = %v, want one each", got)
	}
}

// Runs and single admissions from several readers, a drain in the middle
// and consumers that finish everything: the drain returns, and the count and
// frame releases balance (run under -race).
func TestAdmissionRunsUnderConcurrentDrain(t *testing.T) {
	s, a := newAdapter(t, ext.AdapterConfig{MessageQueue: 8})
	const readers, runs = 4, 200
	var admittedFrames atomic.Int64
	var allOwners sync.Map
	var wg sync.WaitGroup
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < runs; i++ {
				frames, owners := ownedRun(1 + (r+i)%4)
				for j, o := range owners {
					allOwners.Store(o, frames[j])
				}
				var out ext.AdmitOutcome
				if len(frames) == 1 {
					out = a.AdmitMessage(frames[0])
				} else {
					out = a.AdmitMessages(frames)
				}
				switch out {
				case ext.Admitted:
					admittedFrames.Add(int64(len(frames)))
				case ext.Draining:
					for _, f := range frames {
						f.Release() // the transport's echo is done with them
					}
				default:
					t.Errorf("admission = %v before Close", out)
				}
			}
		}()
	}
	consumed := make(chan int64, 1)
	go func() {
		var n int64
		var batch []ext.InboundMessage
		for {
			var err error
			batch, err = a.Messages().PopAll(context.Background(), batch[:0])
			if err != nil {
				consumed <- n
				return
			}
			for _, m := range batch {
				m.Done()
			}
			n += int64(len(batch))
		}
	}()
	waitUntil(t, "some work is admitted", func() bool { return admittedFrames.Load() > 50 })
	s.BeginDrain()
	if err := s.WaitForDrain(generous(t)); err != nil {
		t.Fatalf("WaitForDrain = %v", err)
	}
	wg.Wait()
	if s.InFlight() != 0 {
		t.Fatalf("InFlight = %d after the drain and the readers finished", s.InFlight())
	}
	a.Close()
	if n := recv(t, "the consumer", consumed); n != admittedFrames.Load() {
		t.Fatalf("consumer finished %d messages, %d were admitted", n, admittedFrames.Load())
	}
	allOwners.Range(func(k, _ any) bool {
		if n := k.(*countingOwner).releases.Load(); n != 1 {
			t.Errorf("a frame was released %d times", n)
			return false
		}
		return true
	})
}

// AdmitMessages goes where AdmitBatch goes: with a sink configured, the
// run reaches the sink, not the (unused) queue.
func TestAdmitMessagesUsesTheSink(t *testing.T) {
	var got int
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{
		OnMessages: func(batch []ext.InboundMessage) {
			got += len(batch)
			ext.DoneAll(batch)
		},
	})
	defer a.Close()
	frames := []ext.Frame{{Type: ext.Message}, {Type: ext.Message}, {Type: ext.Message}}
	if out := a.AdmitMessages(frames); out != ext.Admitted {
		t.Fatalf("AdmitMessages = %v, want Admitted", out)
	}
	if got != 3 || a.Messages().Len() != 0 {
		t.Fatalf("sink saw %d messages and the queue holds %d; want 3 and 0", got, a.Messages().Len())
	}
	if n := a.State().InFlight(); n != 0 {
		t.Fatalf("in-flight %d after the sink released every message", n)
	}
}
