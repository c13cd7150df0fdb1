package messenger_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// A handler that lends its answer (Context.LendAnswer) gets its reference
// back on every path: a large answer that the transport holds until
// written, a small one it copies, an error, an Ack that carries no bytes,
// a fire-and-forget request that gets no answer. A transport that retains
// owners gets an answer with the loan as its Owner; any other gets a copy
// without it.
func TestLentAnswerIsReleasedOnEveryPath(t *testing.T) {
	for _, retains := range []bool{true, false} {
		tr, err := tcp.New()
		must(t, err)
		spy := &lentSpy{Transport: tr, retains: retains}
		server := newNodeOn(t, spy)
		caller := newNode(t)
		must(t, caller.RegisterPeer(server.PeerInfo()))
		large := bytes.Repeat([]byte("lent"), 64<<10) // 256 KiB: tcp queues it as it is
		small := []byte("a small lent answer")        // tcp copies it at Send
		// Each case travels to the handler by channel: the socket between
		// them orders nothing for the race detector.
		type lent struct {
			loan   *hook.Loan
			answer []byte
			fail   error
		}
		cases := make(chan lent, 1)
		ran := make(chan struct{}, 1)
		lend := func(c *messenger.Context) ([]byte, error) {
			l := <-cases
			l.loan.Retain() // the handler's reference
			c.LendAnswer(l.loan)
			ran <- struct{}{}
			return l.answer, l.fail
		}
		must(t, server.Messenger().RegisterSystem(messenger.UnaryHandler("_lent_unary", lend)))
		must(t, server.Messenger().RegisterSystem(messenger.SyncHandler("_lent_sync", func(c *messenger.Context) error {
			_, err := lend(c)
			return err
		})))
		must(t, server.Messenger().RegisterSystem(messenger.FireHandler("_lent_fire", func(c *messenger.Context) { lend(c) })))
		boom := errors.New("boom")
		for _, tc := range []struct {
			name    string
			handler string
			answer  []byte
			fail    error
			held    bool // the answer goes to the transport with its Owner
		}{
			{"large answer", "_lent_unary", large, nil, true},
			{"small answer", "_lent_unary", small, nil, true},
			{"error", "_lent_unary", large, boom, false},
			{"ack", "_lent_sync", large, nil, false},
			{"fire-and-forget", "_lent_fire", large, nil, false},
		} {
			loan := hook.NewLoan() // the test is the lender
			cases <- lent{loan, tc.answer, tc.fail}
			owned := spy.lent.Load()
			var got []byte
			var err error
			switch tc.handler {
			case "_lent_unary":
				got, err = caller.Messenger().Unary(testCtx(t), server.InstanceID(), tc.handler, nil)
			case "_lent_sync":
				err = caller.Messenger().Sync(testCtx(t), server.InstanceID(), tc.handler, nil)
			default:
				err = caller.Messenger().Send(testCtx(t), server.InstanceID(), tc.handler, nil)
			}
			select {
			case <-ran:
			case <-time.After(failAfter):
				t.Fatalf("retains=%v, %s: the handler never ran", retains, tc.name)
			}
			switch {
			case tc.fail != nil && (err == nil || !bytes.Contains([]byte(err.Error()), []byte("boom"))):
				t.Fatalf("retains=%v, %s: err = %v, want the handler's", retains, tc.name, err)
			case tc.fail == nil && err != nil:
				t.Fatalf("retains=%v, %s: %v", retains, tc.name, err)
			case tc.handler == "_lent_unary" && tc.fail == nil && !bytes.Equal(got, tc.answer):
				t.Fatalf("retains=%v, %s: the caller got %d other bytes", retains, tc.name, len(got))
			}
			select {
			case <-loan.Idle():
				t.Fatalf("retains=%v, %s: the loan was released more often than retained", retains, tc.name)
			default: // the test's own reference holds it
			}
			loan.Release()
			select {
			case <-loan.Idle():
			case <-time.After(failAfter):
				t.Fatalf("retains=%v, %s: references left on the loan", retains, tc.name)
			}
			if n := spy.lent.Load() - owned; (n == 1) != (retains && tc.held) || n > 1 {
				t.Fatalf("retains=%v, %s: %d answers went to the transport with the loan", retains, tc.name, n)
			}
		}
	}
}

// lentSpy passes on or hides the wrapped transport's ext.OwnerRetainer,
// and counts the frames handed to it with a Loan as their Owner.
type lentSpy struct {
	ext.Transport
	retains bool
	lent    atomic.Int32
}

func (s *lentSpy) Unwrap() ext.Transport { return s.Transport }
func (s *lentSpy) RetainsOwners() bool   { return s.retains }

func (s *lentSpy) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	if _, ok := f.Owner.(*hook.Loan); ok {
		s.lent.Add(1)
	}
	return s.Transport.Send(target, f)
}
