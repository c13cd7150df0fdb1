// Package queuetest is the behavioural suite that every queue backend
// passes. A backend's tests call Run with a Harness that says how to build
// the backend and which promises it makes.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/queue"
)

// FailAfter bounds every wait of the suite. It detects a hang; a healthy
// run never comes near it.
const FailAfter = 20 * time.Second

// Harness describes a backend to the suite.
type Harness struct {
	// New returns a backend for one test. Queue names are fresh per test.
	New func(t *testing.T) queue.Backend
	// Capacity is the most items one queue holds; 0 skips the full test.
	Capacity int
	// SenderCloseClosesQueue: closing a sender closes the queue, so that
	// receivers drain what is left and then get queue.ErrClosed.
	SenderCloseClosesQueue bool
	// Redelivers: an item received and never settled comes back after
	// AckWait, so a receiver crash loses nothing.
	Redelivers bool
	// AckWait is how long an unsettled item stays with its receiver.
	AckWait time.Duration
}

// Job is the item type of the suite.
type Job struct {
	Producer int
	Seq      int
}

var names atomic.Int64

// QueueName returns a name no other test of this process uses.
func QueueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, names.Add(1))
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("FIFOPerProducer", func(t *testing.T) { testFIFO(t, h) })
	t.Run("CompetingReceivers", func(t *testing.T) { testCompeting(t, h) })
	t.Run("Full", func(t *testing.T) { testFull(t, h) })
	t.Run("SenderClose", func(t *testing.T) { testSenderClose(t, h) })
	t.Run("ReceiverClose", func(t *testing.T) { testReceiverClose(t, h) })
	t.Run("CancelWaitingReceive", func(t *testing.T) { testCancel(t, h) })
	t.Run("Nack", func(t *testing.T) { testNack(t, h) })
	t.Run("ReceiverCrash", func(t *testing.T) { testCrash(t, h) })
}

// Ctx is a context bounded by FailAfter.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), FailAfter)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, h Harness) (*queue.Sender[Job], func() *queue.Receiver[Job]) {
	t.Helper()
	b := h.New(t)
	name := QueueName("suite")
	tx, err := queue.NewSender[Job](Ctx(t), b, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Close() })
	return tx, func() *queue.Receiver[Job] {
		rx, err := queue.NewReceiver[Job](Ctx(t), b, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rx.Close() })
		return rx
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func receiveAck(t testing.TB, rx *queue.Receiver[Job]) Job {
	t.Helper()
	it, err := rx.Receive(Ctx(t))
	must(t, err)
	must(t, it.Ack(Ctx(t)))
	return it.Value
}

func isClosed(err error) bool { return errors.Is(err, queue.ErrClosed) }
