package mux

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// fuzzIngress is a mux with one stream from peer open on it: slot
// fuzzSlot of epoch 1 feeds st, its OpenSlot was frame_seq 0 and batch_seq
// 1, so the next in-order Data is frame_seq 1.
type fuzzIngress struct {
	mx   *Mux
	st   *inlet.State
	lane int
}

const (
	fuzzPeer    = ext.WorkerID(7)
	fuzzSession = uint64(99)
	fuzzAnchor  = uint64(1234)
	fuzzCredit  = 64
)

var fuzzSlot, _ = muxwire.NewSlotID(0, 1)

func newFuzzIngress(t testing.TB) *fuzzIngress {
	mx := New(Config{InitialCredit: fuzzCredit}, time.Hour, func(ext.WorkerID, int, []byte) error { return nil })
	mx.Log = discardLog
	t.Cleanup(mx.Close)
	fi := &fuzzIngress{mx: mx}
	fi.st, fi.lane = fi.bind(t, fuzzAnchor, fuzzSession)
	fi.handle(t, fi.batch(t, 1, 1, func(e *muxwire.Encoder) { e.OpenSlot(fuzzSlot, 0, fuzzAnchor, fuzzSession) }))
	return fi
}

// bind makes an anchor for peer to open a stream on.
func (fi *fuzzIngress) bind(t testing.TB, anchor, session uint64) (*inlet.State, int) {
	home := &inlet.Home{Owner: simOwner{}, Lifetime: inlet.Forever, Base: time.Now()}
	st := new(inlet.State)
	st.Init(home, fuzzCredit, 0, [16]byte{})
	st.SetHandle(wire.NewAnchorHandle(1, anchor))
	if _, why := st.ClaimMux(func(inlet.Prebind) bool { return false }); why != inlet.Claimed {
		t.Fatalf("claim: %v", why)
	}
	lane, ok := fi.mx.Bind(st, fuzzPeer, session, time.Hour, 1, nil)
	if !ok {
		t.Fatal("bind refused")
	}
	return st, lane
}

func (fi *fuzzIngress) batch(t testing.TB, epoch uint64, seq uint32, records func(*muxwire.Encoder)) []byte {
	var e muxwire.Encoder
	if err := e.Start(nil, fi.lane, epoch, seq); err != nil {
		t.Fatal(err)
	}
	records(&e)
	return append([]byte(nil), e.Batch()...)
}

func (fi *fuzzIngress) handle(t testing.TB, p []byte) {
	if err := fi.mx.HandleBatch(fuzzPeer, fi.lane, p); err != nil {
		t.Fatal(err)
	}
}

// fuzzSeeds are valid batches for a fuzzIngress, in epoch 1 from
// batch_seq 2: the cases of bodypack.go and the ingress's other paths.
func fuzzSeeds(t testing.TB, fi *fuzzIngress) [][]byte {
	item := func(n int) []byte { return wire.BytesItem(bytes.Repeat([]byte{'x'}, n)) }
	other, _ := muxwire.NewSlotID(1, 1)
	again, _ := muxwire.NewSlotID(0, 2)
	b := func(epoch uint64, records func(e *muxwire.Encoder)) []byte { return fi.batch(t, epoch, 2, records) }
	return [][]byte{
		b(1, func(e *muxwire.Encoder) {}),
		b(1, func(e *muxwire.Encoder) {
			for i, n := range []int{0, 1, 40, 100} {
				e.Data(fuzzSlot, uint32(1+i), item(n))
			}
		}),
		b(1, func(e *muxwire.Encoder) { // larger than packed, larger than a block, then one filling the rest
			e.Data(fuzzSlot, 1, item(bodyAlone))
			e.Data(fuzzSlot, 2, item(bodyBlock+1))
			e.Data(fuzzSlot, 3, item(bodyBlock-100))
			e.Data(fuzzSlot, 4, item(80))
		}),
		b(1, func(e *muxwire.Encoder) { // out of order: held, then released
			e.Data(fuzzSlot, 2, item(3))
			e.Data(fuzzSlot, 1, item(2))
			e.Data(fuzzSlot, 3, wire.HeartbeatBytes)
			e.Data(fuzzSlot, 4, []byte(wire.FinalizedFrame))
		}),
		b(1, func(e *muxwire.Encoder) { // every record type, other slots too
			e.Data(fuzzSlot, 1, item(5))
			e.CreditUpdate(fuzzSlot, 0, 3)
			e.SlotHeartbeat(fuzzSlot, 0)
			e.LifecycleSlot(fuzzSlot, 0, fuzzSession, muxwire.Stop)
			e.OpenSlot(other, 0, 5, 6)
			e.Data(other, 1, item(5))
			e.CloseSlot(other, 2, muxwire.UnknownSlot)
			e.Data(fuzzSlot, 2, item(6))
			e.CloseSlot(fuzzSlot, 3, muxwire.TerminalSent)
		}),
		b(1, func(e *muxwire.Encoder) { // a generation collision, data to a closed slot
			e.OpenSlot(again, 0, fuzzAnchor, fuzzSession)
			e.Data(again, 1, item(1))
			e.Data(fuzzSlot, 1, item(1))
		}),
		b(1, func(e *muxwire.Encoder) { // more than the credit
			for i := range fuzzCredit + 2 {
				e.Data(fuzzSlot, uint32(1+i), item(1))
			}
		}),
		b(2, func(e *muxwire.Encoder) { e.Data(fuzzSlot, 1, item(1)) }), // a new epoch retires the slot
		b(0, func(e *muxwire.Encoder) { e.Data(fuzzSlot, 1, item(1)) }), // a stale one
	}
}

// FuzzHandleBatch feeds one batch, any bytes, to a mux with a stream
// open, and checks that HandleBatch does not panic; refuses exactly what
// muxwire.Decode refuses; allocates no more than a few times the batch's
// size; delivers to the stream, in order and as they were sent, the
// items a well-formed batch carries for it in turn (its bodies are the
// consumer's: the batch's bytes are overwritten before the consumer
// reads them); and that the mux then still takes a new stream in the
// next epoch and delivers its item.
func FuzzHandleBatch(f *testing.F) {
	for _, s := range fuzzSeeds(f, newFuzzIngress(f)) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		fi := newFuzzIngress(t)
		var m fuzzModel
		want, decodes := m.expect(p, fi.lane, nil)
		in := bytes.Clone(p)

		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		err := fi.mx.HandleBatch(fuzzPeer, fi.lane, p)
		runtime.ReadMemStats(&m1)
		if (err == nil) != decodes {
			t.Fatalf("HandleBatch: %v; Decode accepts it: %v", err, decodes)
		}
		if !bytes.Equal(in, p) {
			t.Fatal("HandleBatch changed its input")
		}
		// The bodies a table copies, its slot table and hold, the replies
		// a batch makes: each in proportion to the batch, and no table or
		// block is bigger than 64 KiB (a first batcher's buffers).
		if got, limit := m1.TotalAlloc-m0.TotalAlloc, uint64(4*len(p)+64<<10); got > limit {
			t.Fatalf("a batch of %d bytes allocated %d bytes, want at most %d", len(p), got, limit)
		}
		for i := range p {
			p[i] = 0xee // the transport reuses its read buffer
		}
		for i, w := range want {
			fr, err := fi.st.Pop(simDone)
			if err != nil || fr.Kind != wire.KindItem || !bytes.Equal(fr.Item, w) {
				t.Fatalf("item %d: %v %q (kind %v), want %q", i, err, fr.Item, fr.Kind, w)
			}
		}

		// Whatever the batch did to the table (an epoch moved on, slots
		// ended or held, a peer budget spent), the next epoch starts
		// afresh.
		ip, _ := fi.mx.IngressFor(fuzzPeer, fi.lane)
		ip.Mu.Lock()
		epoch := ip.Epoch
		ip.Mu.Unlock()
		st, lane := fi.bind(t, fuzzAnchor+1, fuzzSession+1)
		if lane != fi.lane {
			t.Fatalf("a second bind on lane %d, the first on %d", lane, fi.lane)
		}
		fi.handle(t, fi.batch(t, epoch+1, 1, func(e *muxwire.Encoder) {
			e.OpenSlot(fuzzSlot, 0, fuzzAnchor+1, fuzzSession+1)
			e.Data(fuzzSlot, 1, wire.BytesItem([]byte("next")))
		}))
		if fr, err := st.Pop(simDone); err != nil || fr.Kind != wire.KindItem || string(fr.Item) != "\xc4\x04next" {
			t.Fatalf("the next epoch's stream: %v %q", err, fr.Item)
		}
	})
}

// fuzzModel is what a fuzzIngress's stream must get from the batches it
// is given: the items of the Data records for it that come in turn
// (frame_seq 1, 2, ...), within its credit, up to the first record that
// may end it, hold records or skip one (anything else naming its index:
// another generation, a close, a record out of turn, a body that is not
// an item). The stream may get more than that (held records released,
// say); never other ones first.
type fuzzModel struct {
	next    uint32
	stopped bool
}

// expect adds to want the items batch p must deliver. decodes is whether
// muxwire.Decode accepts p.
func (m *fuzzModel) expect(p []byte, lane int, want [][]byte) (_ [][]byte, decodes bool) {
	b, err := muxwire.Decode(p)
	if err != nil {
		return want, false
	}
	if m.next == 0 {
		m.next = 1
	}
	if b.Lane() != lane || b.Header.Epoch != 1 {
		m.stopped = m.stopped || b.Lane() == lane // a new epoch ends the stream
		return want, true
	}
	r := b.Records()
	for !m.stopped {
		rec, ok := r.Next()
		if !ok || m.next > fuzzCredit {
			break
		}
		if rec.Slot.Index() != fuzzSlot.Index() {
			continue
		}
		switch rec.Type {
		case muxwire.CreditUpdate, muxwire.SlotHeartbeat, muxwire.LifecycleSlot:
			if rec.Slot == fuzzSlot {
				continue // for this side's producer, or liveness only
			}
		case muxwire.Data:
			if rec.Slot == fuzzSlot && rec.Seq == m.next && !wire.IsTerminalFrame(rec.Body) {
				if fr, err := wire.DecodeFrame(rec.Body); err == nil && fr.Kind == wire.KindItem {
					want = append(want, bytes.Clone(fr.Item))
					m.next++
					continue
				}
			}
		}
		m.stopped = true
	}
	return want, true
}

// FuzzHandleBatchOps is FuzzHandleBatch on batches the encoder writes
// from ops, three bytes a record (its type, its slot, one field), so that
// what it explores is the ingress rather than the decoder's refusals:
// records in and out of turn, over credit, for other slots and
// generations, closes, opens of known and unknown binds, terminals,
// bodies of every size class bodypack.go tells apart, and several
// batches in one buffer that the next batch overwrites, as a transport's
// read buffer is.
func FuzzHandleBatchOps(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 0, 3})
	f.Add([]byte{0, 0, 2, 0, 0, 1, 7, 0, 0, 0, 0, 3, 0, 0, 200})
	f.Add([]byte{1, 0, 1, 1, 0, 2, 2, 0, 3, 3, 0x10, 0, 4, 0x10, 0, 5, 0, 9, 6, 0, 0, 7, 0, 0, 0, 0, 4})
	f.Add([]byte{0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0, 0, 5, 3, 1, 0, 0, 1, 6, 0, 0, 7})
	f.Add([]byte{0, 0, 1, 0, 0, 250, 0, 0, 251, 0, 0, 252, 0, 0, 253, 7, 0, 0, 0, 0, 254, 0, 0, 255})
	f.Fuzz(func(t *testing.T, ops []byte) {
		fi := newFuzzIngress(t)
		var m fuzzModel
		var want [][]byte
		var e muxwire.Encoder
		buf := make([]byte, 0, 1<<10)
		seq := uint32(1)
		start := func() {
			seq++
			if err := e.Start(buf[:0], fi.lane, 1, seq); err != nil {
				t.Fatal(err)
			}
		}
		flush := func() {
			p := e.Batch()
			var decodes bool
			if want, decodes = m.expect(p, fi.lane, want); !decodes {
				t.Fatalf("the encoder's batch % x is refused", p)
			}
			fi.handle(t, p)
			buf = p[:0] // the next batch overwrites this one
		}
		start()
		frameSeq := map[muxwire.SlotID]uint32{}
		for ; len(ops) >= 3; ops = ops[3:] {
			kind, sb, arg := ops[0]%10, ops[1], ops[2]
			slot, _ := muxwire.NewSlotID(uint32(sb>>4)%3, 1+sb&1)
			if sb&2 != 0 { // the next frame_seq of the slot, not a chosen one
				frameSeq[slot]++
			} else {
				frameSeq[slot] = uint32(sb >> 2 & 3)
			}
			fs := frameSeq[slot]
			switch kind {
			case 0, 1, 2, 3:
				e.Data(slot, fs, fuzzBody(arg))
			case 4:
				anchor, session := fuzzAnchor, fuzzSession
				if arg&1 != 0 {
					anchor, session = uint64(arg), uint64(arg)
				}
				e.OpenSlot(slot, fs, anchor, session)
			case 5:
				e.CloseSlot(slot, fs, muxwire.CloseReason(arg%4))
			case 6:
				e.CreditUpdate(slot, fs, uint32(arg))
			case 7:
				e.SlotHeartbeat(slot, fs)
			case 8:
				e.LifecycleSlot(slot, fs, uint64(arg>>1), muxwire.LifecycleAction(arg&1))
			case 9:
				flush()
				start()
			}
		}
		flush()
		for i := range buf[:cap(buf)] {
			buf[:cap(buf)][i] = 0xee
		}
		for i, w := range want {
			fr, err := fi.st.Pop(simDone)
			if err != nil || fr.Kind != wire.KindItem || !bytes.Equal(fr.Item, w) {
				t.Fatalf("item %d: %v %q (kind %v), want %q", i, err, fr.Item, fr.Kind, w)
			}
		}
	})
}

// fuzzBody is a Data body chosen by one byte: mostly a byte item, of up
// to 64 bytes or, at the top of the range, as large as a packed body can
// be, just larger, and larger than a block; else a heartbeat, a terminal,
// or bytes that are no frame.
func fuzzBody(b byte) []byte {
	switch {
	case b < 200:
		return wire.BytesItem(bytes.Repeat([]byte{b}, int(b%64)))
	case b < 240:
		return wire.BytesItem(bytes.Repeat([]byte{b}, []int{bodyAlone - 8, bodyAlone, bodyBlock, bodyBlock - 30}[b%4]))
	case b < 245:
		return wire.HeartbeatBytes
	case b < 250:
		return []byte([]string{wire.FinalizedFrame, wire.DroppedFrame, wire.DetachedFrame}[b%3])
	case b < 253:
		return nil
	}
	return []byte{b, 0x00}
}
