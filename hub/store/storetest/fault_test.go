package storetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/storetest"
)

func newFault(t *testing.T) *storetest.FaultStore {
	s, err := storetest.NewFaultStore()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestFaultIndeterminate(t *testing.T) {
	ctx := context.Background()
	s := newFault(t)
	id := ext.NewInstanceID()

	s.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.NotApplied, Times: 1})
	op := store.NewOpID()
	if _, err := s.Put(ctx, op, storetest.Record(id, 1), 0); !errors.Is(err, store.ErrIndeterminate) {
		t.Fatalf("not-applied put: %v", err)
	}
	if _, ok, err := s.ResolveWrite(ctx, id, op); ok || err != nil {
		t.Fatalf("not-applied write resolves as %v %v", ok, err)
	}

	s.Inject(storetest.OpPut, storetest.Fault{Indeterminate: storetest.AppliedLost, Times: 1})
	op = store.NewOpID()
	if _, err := s.Put(ctx, op, storetest.Record(id, 1), 0); !errors.Is(err, store.ErrIndeterminate) {
		t.Fatalf("applied-lost put: %v", err)
	}
	e, ok, err := s.ResolveWrite(ctx, id, op)
	if !ok || err != nil || e.Incarnation == 0 {
		t.Fatalf("applied write resolves as %+v %v %v", e, ok, err)
	}
	// Times: 1 used the fault up.
	if _, err := s.Put(ctx, store.NewOpID(), storetest.Record(id, 2), e.Incarnation); err != nil {
		t.Fatalf("put after the fault: %v", err)
	}
}

func TestFaultGateAndError(t *testing.T) {
	ctx := context.Background()
	s := newFault(t)
	id := ext.NewInstanceID()
	inc, _ := s.Put(ctx, store.NewOpID(), storetest.Record(id, 1), 0)

	g := storetest.NewGate()
	s.Inject(storetest.OpRemove, storetest.Fault{Gate: g})
	done := make(chan error, 1)
	go func() { done <- s.Remove(ctx, id, inc) }()
	<-g.Reached()
	if _, ok := s.Get(id); !ok {
		t.Fatal("a remove held at the gate applied")
	}
	g.Open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A gated call whose context ends gives up and does nothing.
	inc, _ = s.Put(ctx, store.NewOpID(), storetest.Record(id, 1), 0)
	s.Inject(storetest.OpRemove, storetest.Fault{Gate: storetest.NewGate()})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.Remove(cctx, id, inc); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("gated remove past its deadline: %v", err)
	}
	if _, ok := s.Get(id); !ok {
		t.Fatal("a remove that gave up applied")
	}

	boom := errors.New("boom")
	s.Inject(storetest.OpPut, storetest.Fault{Err: boom})
	if _, err := s.Put(ctx, store.NewOpID(), storetest.Record(ext.NewInstanceID(), 1), 0); !errors.Is(err, boom) {
		t.Fatalf("faulted put: %v", err)
	}
	s.Clear()
	if _, err := s.Put(ctx, store.NewOpID(), storetest.Record(ext.NewInstanceID(), 1), 0); err != nil {
		t.Fatalf("put after Clear: %v", err)
	}
}

func TestFaultContinuity(t *testing.T) {
	s := newFault(t)
	c, ch := s.ContinuityWatch()
	if c != store.Live {
		t.Fatal(c)
	}
	s.SetContinuity(store.Fenced)
	<-ch
	s.SetContinuity(store.Live)
	if s.Continuity() != store.Fenced {
		t.Fatalf("fenced store went %v", s.Continuity())
	}
}
