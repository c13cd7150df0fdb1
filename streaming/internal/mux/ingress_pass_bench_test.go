package mux

import (
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// frontPass is a frontend's share of one forward pass, the response
// plane's shape (velo-bench response-plane: an engine's batch to a
// frontend holds one 40-byte token for each of its streams there): the
// batch is applied, each consumer takes its token, and the credit goes
// back, built into one reply batch.
type frontPass struct {
	tb    testing.TB
	mx    *Mux
	sts   []*inlet.State
	batch []byte // the pass's batch, its sequence numbers moved on each step
	pass  uint32
	lane  int
	reply *Batcher
}

const frontPeer = ext.WorkerID(7)

func newFrontPass(tb testing.TB, streams int) *frontPass {
	const local = uint64(1234)
	mx := New(Config{InitialCredit: 1 << 20, ReplyLinger: time.Hour}, time.Hour, func(ext.WorkerID, int, []byte) error { return nil })
	mx.Log = discardLog
	mx.PostOwned = func(ext.WorkerID, int, []byte, ext.Owner) error { return nil }
	tb.Cleanup(mx.Close)
	home := &inlet.Home{Owner: simOwner{}, Lifetime: inlet.Forever, Base: time.Now()}
	p := &frontPass{tb: tb, mx: mx}
	var enc muxwire.Encoder
	batchSeq := uint32(0)
	start := func() {
		batchSeq++
		if err := enc.Start(nil, p.lane, 1, batchSeq); err != nil {
			tb.Fatal(err)
		}
	}
	var opens []func()
	for i := range streams {
		st := new(inlet.State)
		st.Init(home, 64, 0, [16]byte{})
		st.SetHandle(wire.NewAnchorHandle(1, local+uint64(i)))
		if _, why := st.ClaimMux(func(inlet.Prebind) bool { return false }); why != inlet.Claimed {
			tb.Fatalf("claim: %v", why)
		}
		session := uint64(100 + i)
		lane, ok := mx.Bind(st, frontPeer, session, time.Hour, 1, nil)
		if !ok {
			tb.Fatal("bind refused")
		}
		p.lane = lane
		p.sts = append(p.sts, st)
		slot, _ := muxwire.NewSlotID(uint32(i), 1)
		opens = append(opens, func() { enc.OpenSlot(slot, 0, local+uint64(i), session) })
	}
	start()
	for _, o := range opens {
		o()
	}
	p.handle(append([]byte(nil), enc.Batch()...))
	token := wire.BytesItem(make([]byte, 40))
	start()
	for i := range streams {
		slot, _ := muxwire.NewSlotID(uint32(i), 1)
		enc.Data(slot, 0, token)
	}
	p.batch = append([]byte(nil), enc.Batch()...)
	p.pass = 1 // the OpenSlot's batch_seq
	b, err := mx.replyBatcher(frontPeer, p.lane)
	if err != nil {
		tb.Fatal(err)
	}
	p.reply = b
	return p
}

func (p *frontPass) handle(b []byte) {
	if err := p.mx.HandleBatch(frontPeer, p.lane, b); err != nil {
		p.tb.Fatal(err)
	}
}

// step is one pass. The batch is the one of the last pass with its
// batch_seq and frame_seqs moved on, in place: warm in the cache, like a
// batch the transport has just read.
func (p *frontPass) step() {
	p.pass++
	binary.BigEndian.PutUint32(p.batch[12:], p.pass)
	frameSeq := p.pass - 1 // the OpenSlot's batch was the first
	for off := muxwire.BatchHeaderLen; off < len(p.batch); {
		binary.BigEndian.PutUint32(p.batch[off+5:], frameSeq)
		off += muxwire.RecordHeaderLen + int(binary.BigEndian.Uint32(p.batch[off+9:]))
	}
	p.handle(p.batch) // returns the last pass's credit too
	for _, st := range p.sts {
		if _, err := st.PopBytes(simDone); err != nil {
			p.tb.Fatal(err)
		}
	}
	b := p.reply
	b.Mu.Lock()
	b.lingered = true
	b.Mu.Unlock()
	ob := b.TakeBuf()
	batch, _, _, _, _ := b.Build(ob)
	ob.set(batch)
	ob.Release()
	b.settleCredit(nil)
}

// BenchmarkFrontPass16 is one frontend pass of 16 streams; it reports the
// cost per token.
func BenchmarkFrontPass16(b *testing.B) {
	const streams = 16
	p := newFrontPass(b, streams)
	p.step()
	n := 0
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		p.step()
		n++
	}
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*streams), "ns/token")
	// The process's CPU time, as velo-bench counts it: on a shared
	// machine it moves less than the time on the clock.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n*streams), "cpu-ns/token")
}

// processCPU is the user and system time of the process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIngressLetsGoOfBatchBodies: once a batch is applied, the ingress
// table holds no slice of it (its runs' bodies are cleared once per
// batch, not run by run, and must still all be cleared).
func TestIngressLetsGoOfBatchBodies(t *testing.T) {
	p := newFrontPass(t, 16)
	for range 3 {
		p.step()
	}
	ip, _ := p.mx.IngressFor(frontPeer, p.lane)
	ip.Mu.Lock()
	defer ip.Mu.Unlock()
	bodies := ip.run.bodies[:cap(ip.run.bodies)]
	if len(bodies) == 0 {
		t.Fatal("no run was gathered")
	}
	for i, b := range bodies {
		if b != nil {
			t.Fatalf("bodies[%d] still holds %d bytes of the last batch", i, len(b))
		}
	}
}
