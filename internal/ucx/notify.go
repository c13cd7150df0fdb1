//go:build ucx

package ucx

import "sync"

// notifier calls the OnEndpointError function off the progress thread:
// the loop posts without blocking (the queue is unbounded, one entry per
// failed endpoint) and one goroutine delivers in order.
type notifier struct {
	w      *Worker
	mu     sync.Mutex
	queue  []endpointErr
	closed bool
	kick   chan struct{}
	done   chan struct{}
}

type endpointErr struct {
	ep  EndpointID
	err error
}

func newNotifier(w *Worker) *notifier {
	n := &notifier{w: w, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go n.run()
	return n
}

// post queues one report; it never blocks.
func (n *notifier) post(ep EndpointID, err error) {
	n.mu.Lock()
	n.queue = append(n.queue, endpointErr{ep, err})
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *notifier) run() {
	defer close(n.done)
	for {
		n.mu.Lock()
		batch, closed := n.queue, n.closed
		n.queue = nil
		n.mu.Unlock()
		for _, e := range batch {
			if fn := n.w.onErr.Load(); fn != nil {
				(*fn)(e.ep, e.err)
			}
		}
		if closed && len(batch) == 0 {
			return
		}
		if len(batch) == 0 {
			<-n.kick
		}
	}
}

// stop delivers what is queued, then ends the goroutine.
func (n *notifier) stop() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
	<-n.done
}
