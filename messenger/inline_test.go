package messenger_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/velo-go/velo"
)

// TestInlineRunsOnTheConnectionReader: an inline handler runs on the
// goroutine that serves the connection, so a request is answered without a
// goroutine hand-off, and one sender's messages run in the order sent.
func TestInlineRunsOnTheConnectionReader(t *testing.T) {
	const per = 500
	server, callers := cluster(t, 2)
	log := newSequenceLog(2 * per)
	onReader := make(chan bool, 2*per)
	must(t, server.Register(velo.FireHandler("in", func(c *velo.Context) {
		buf := make([]byte, 4096)
		stack := string(buf[:runtime.Stack(buf, false)])
		onReader <- strings.Contains(stack, "streamsock.(*reader).lead")
		log.add(c)
	}, velo.WithInline())))
	for _, c := range callers {
		must(t, c.WaitForHandler(testCtx(t), server.InstanceID(), "in"))
	}
	sendAll(t, server, callers, "in", per, false)
	recv(t, log.done, "every message")
	log.checkInOrder(t, callers, per)
	for range 2 * per {
		if !<-onReader {
			t.Fatal("an inline handler ran off the connection's goroutine")
		}
	}
}

func TestInlineRefusesLaneOptions(t *testing.T) {
	n := newNode(t)
	err := n.Register(velo.UnaryHandler("x", func(*velo.Context) ([]byte, error) { return nil, nil },
		velo.WithInline(), velo.WithMaxConcurrent(2)))
	if err == nil || !strings.Contains(err.Error(), "inline") {
		t.Fatalf("want a refusal naming inline dispatch, got %v", err)
	}
	err = n.Register(velo.UnaryHandler("y", func(*velo.Context) ([]byte, error) { return nil, nil },
		velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: 8}), velo.WithInline()))
	if err == nil || !strings.Contains(err.Error(), "queue depth") {
		t.Fatalf("want a refusal of a queue depth with inline dispatch, got %v", err)
	}
}
