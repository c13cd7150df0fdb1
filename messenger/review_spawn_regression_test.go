package messenger

import (
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// A request submitted just as teardown begins is run or refused, never
// stranded with its in-flight guard held (a parked worker may take the
// done branch of its select).
func TestReviewSpawnSubmitAtTeardownStrands(t *testing.T) {
	stranded := 0
	const rounds = 500
	for i := 0; i < rounds; i++ {
		m := &Messenger{done: make(chan struct{})}
		r := m.newRegistered(FireHandler("s", func(*Context) {}))
		st := ext.NewShutdownState()
		g, _ := st.TryAcquire()
		r.dispatch(job{msg: ext.InboundMessage{Guard: g}, hdr: requestHeader{rtype: FireAndForget}})
		for {
			r.pool.mu.Lock()
			p := r.pool.parked
			r.pool.mu.Unlock()
			if p == 1 && st.InFlight() == 0 {
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
		g2, _ := st.TryAcquire()
		go close(m.done)
		r.dispatch(job{msg: ext.InboundMessage{Guard: g2}, hdr: requestHeader{rtype: FireAndForget}})
		deadline := time.Now().Add(200 * time.Millisecond)
		for st.InFlight() != 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if st.InFlight() != 0 {
			stranded++
		}
	}
	t.Logf("%d of %d requests submitted at teardown were neither run nor refused", stranded, rounds)
	if stranded > 0 {
		t.Fail()
	}
}
