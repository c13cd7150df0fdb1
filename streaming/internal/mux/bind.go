package mux

// The binds of the owner's side of the mux: an anchor bound by an attach
// (or a ticket) waits in the mux's table for the OpenSlot that claims it,
// until its accept window ends.

import (
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Bind registers a stream of st for the mux, to be claimed by the OpenSlot
// of producer peer with session; window is the accept window.
func (mx *Mux) Bind(st *inlet.State, peer ext.WorkerID, session uint64, window time.Duration, lanes int, key *uint64) (lane int, ok bool) {
	return mx.BindProducer(st, nil, peer, session, window, lanes, key)
}

// BindProducer is bind for one producer p of an MPSC anchor (nil for an
// SPSC anchor).
func (mx *Mux) BindProducer(st *inlet.State, p *inlet.Remote, peer ext.WorkerID, session uint64, window time.Duration, lanes int, key *uint64) (lane int, ok bool) {
	bd := &Bind{Mx: mx, St: st, mpsc: p, peer: peer, Credit: mx.Cfg.InitialCredit}
	ok = mx.AddBind(BindKey{st.Handle().LocalID(), session}, bd, window, lanes, key)
	return bd.Lane, ok
}

// AddBind puts bd in the table under k, with its accept window.
// Its lane is chosen now, among lanes, and the bind counts on it.
func (mx *Mux) AddBind(k BindKey, bd *Bind, window time.Duration, lanes int, key *uint64) bool {
	bd.Key = k
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.closed {
		return false
	}
	bd.Lane = mx.pickLaneLocked(bd.peer, lanes, key)
	mx.countLocked(bd.peer, bd.Lane, 1)
	mx.binds[k] = bd
	mx.nextBind++
	bd.id = mx.nextBind
	mx.bindIDs[bd.id] = bd
	mx.acceptQ.Add(bd.id, time.Now().Add(window))
	return true
}

// forgetLocked takes bd out of the tables and its accept window out of the
// queue. The caller holds mx.mu and has checked that bd is in binds.
func (mx *Mux) forgetLocked(bd *Bind) {
	delete(mx.binds, bd.Key)
	delete(mx.bindIDs, bd.id)
	mx.acceptQ.Remove(bd.id)
}

// expireBind is the accept-window queue's expiry: it ends a bound stream
// whose OpenSlot did not come in time; the consumer sees ErrSenderDropped.
// One queue and its one goroutine serve every bind, so a bind costs no
// timer and no goroutine.
func (mx *Mux) expireBind(id uint64) {
	mx.Mu.Lock()
	bd := mx.bindIDs[id]
	if bd == nil || mx.binds[bd.Key] != bd {
		mx.Mu.Unlock()
		return
	}
	delete(mx.binds, bd.Key)
	delete(mx.bindIDs, id)
	mx.countLocked(bd.peer, bd.Lane, -1)
	mx.Mu.Unlock()
	mx.N.UnclaimedReaped.Add(1)
	bd.drop()
}

// claim takes the bind an OpenSlot names, if peer made it.
func (mx *Mux) claim(k BindKey, peer ext.WorkerID) *Bind {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	bd := mx.binds[k]
	if bd == nil || (bd.peer != peer && !bd.Prebound) {
		return nil
	}
	mx.forgetLocked(bd)
	if bd.Prebound { // the pre-bind counted on the node; now on its sender too
		mx.countPeerLocked(peer, bd.Lane, 1)
	}
	return bd
}

// DropBinds ends the binds of a lost producer at once.
func (mx *Mux) DropBinds(peer ext.WorkerID) {
	mx.Mu.Lock()
	var gone []*Bind
	for _, bd := range mx.binds {
		if bd.peer == peer {
			mx.forgetLocked(bd)
			mx.countLocked(bd.peer, bd.Lane, -1)
			gone = append(gone, bd)
		}
	}
	mx.Mu.Unlock()
	for _, bd := range gone {
		bd.drop()
	}
}

// drop ends a bind that no OpenSlot claimed: Dropped for the stream, or
// for the MPSC producer.
func (bd *Bind) drop() {
	if bd.mpsc != nil {
		bd.St.MPSC().EndRemote(bd.mpsc, inlet.DroppedFrame)
		return
	}
	bd.St.Terminate(inlet.NewSender(bd.St, false), inlet.DroppedFrame, false)
}

// Release is unbind, as the inlet.Prebind the inlet keeps.
func (bd *Bind) Release() { bd.Mx.unbind(bd) }

// unbind takes bd out of the table, if it is still there unclaimed.
func (mx *Mux) unbind(bd *Bind) {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.binds[bd.Key] == bd {
		mx.forgetLocked(bd)
		mx.countLocked(bd.peer, bd.Lane, -1)
	}
}

// Adopt gives an unclaimed pre-bind to the producer of an ordinary attach.
// It is false when an OpenSlot has claimed it already.
func (mx *Mux) Adopt(bd *Bind, producer ext.WorkerID) bool {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.binds[bd.Key] != bd {
		return false
	}
	bd.Prebound, bd.peer = false, producer
	mx.countPeerLocked(producer, bd.Lane, 1)
	return true
}

// RenewBind gives an unclaimed bind a full accept window from now. A bind
// claimed, released or reaped is left alone: renewal cannot revive it.
func (mx *Mux) RenewBind(bd *Bind, window time.Duration) {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.binds[bd.Key] == bd {
		// Reset does nothing to an entry the queue is expiring: renewal
		// cannot revive a bind.
		mx.acceptQ.Reset(bd.id, time.Now().Add(window))
	}
}
