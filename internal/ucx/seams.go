//go:build ucx

package ucx

import (
	"context"
)

// This file holds the seams the tests use to put the progress thread in
// states a live peer would not: stopped, or sending what velo never sends.

// pause stops w's progress thread (it runs no command and progresses
// nothing, like a peer that hangs) until the returned func is called.
func (w *Worker) pause() (resume func()) {
	held, release := make(chan struct{}), make(chan struct{})
	if err := w.submit(context.Background(), func(*loop) {
		close(held)
		<-release
	}); err != nil {
		return func() {}
	}
	<-held
	return func() { close(release) }
}

// sendRndv sends with UCP_AM_SEND_FLAG_RNDV instead of EAGER, as a sender
// that is not this binding may.
func (w *Worker) sendRndv(ep EndpointID, id uint16, header, data []byte, done func(error)) error {
	o := &op{kind: opSend, ep: ep, done: done}
	o.pinBytes(header)
	o.pinBytes(data)
	return w.submit(context.Background(), func(l *loop) { l.post(o, id, header, data, flagRndv) })
}
