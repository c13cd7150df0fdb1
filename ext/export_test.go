package ext

// Test seams: they let the external tests wait on an observable signal (a
// producer or consumer parked inside the queue) instead of sleeping.

// ProducerWaiting reports whether a Push is parked on a full queue.
func (q *Queue[T]) ProducerWaiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.notFull != nil
}

// ConsumerWaiting reports whether a Pop or PopAll is parked on an empty queue.
func (q *Queue[T]) ConsumerWaiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.notEmpty != nil
}
