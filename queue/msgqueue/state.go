package msgqueue

import (
	"time"
)

// lease is an item handed to a receiver and not yet settled.
type lease struct {
	data     []byte
	deadline time.Time
}

// qstate is one named queue on the owner. The Service's mutex guards it.
type qstate struct {
	items    [][]byte
	inflight map[uint64]lease
	capacity int // 0: no bound
}

// full reports whether the queue holds as many items as it may: waiting
// and leased items both count, as a JetStream WorkQueue stream counts
// unacknowledged messages.
func (q *qstate) full() bool {
	return q.capacity > 0 && len(q.items)+len(q.inflight) >= q.capacity
}

// reclaim puts leases whose ack wait has passed back at the head, oldest
// lease first, and returns the earliest deadline still running (zero if
// none).
func (q *qstate) reclaim(now time.Time) time.Time {
	var back []uint64
	var next time.Time
	for id, l := range q.inflight {
		if !now.Before(l.deadline) {
			back = append(back, id)
		} else if next.IsZero() || l.deadline.Before(next) {
			next = l.deadline
		}
	}
	sortIDs(back)
	for i := len(back) - 1; i >= 0; i-- {
		q.items = append([][]byte{q.inflight[back[i]].data}, q.items...)
		delete(q.inflight, back[i])
	}
	return next
}

func (q *qstate) pop() ([]byte, bool) {
	if len(q.items) == 0 {
		return nil, false
	}
	data := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return data, true
}

func sortIDs(ids []uint64) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}
