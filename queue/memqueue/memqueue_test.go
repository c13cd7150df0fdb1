package memqueue_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/queue"
	"github.com/velo-go/velo/queue/memqueue"
	"github.com/velo-go/velo/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSuite(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{
		New:                    func(*testing.T) queue.Backend { return memqueue.New(8) },
		Capacity:               8,
		SenderCloseClosesQueue: true,
	})
}
