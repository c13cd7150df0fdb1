package hostile

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// The fuzzer sends random mux traffic for Options.FuzzDuration while legit
// streams run both ways: batches of random records (every type, random
// slot ids near and far from the real ones, random frame_seq, credit,
// close reasons, lifecycle actions and sessions) under random epochs
// (the guessable small ones, huge ones, 2^64-1), on random lanes, some
// staged with random _mux_slot tags, some truncated or corrupt, and
// forged event triggers. Three connections send them: one as strangers
// (a new made-up worker id per frame), one posing as the legit peer in
// its producer's role (to the victim's ingress), one posing as it in its
// consumer's role (to the victim's batchers: credit, closes, stops).
func fuzzCase() *Case {
	return &Case{
		Name:  "fuzz",
		Issue: "random records, epochs, slot ids, credit and tags from a stranger and from a peer posing as each side",
		In:    true, Out: true,
		Attack: fuzzAttack,
	}
}

func fuzzAttack(ctx context.Context, r *run) error {
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed), 0x5eed))
	r.res.Extra["seed"] = float64(r.o.Seed)
	roles := []struct {
		name   string
		sender func() ext.WorkerID
	}{
		{"stranger", func() ext.WorkerID { return ext.WorkerID(rng.Uint64() | 1) }},
		{"as-producer", r.legit.worker},
		{"as-consumer", r.legit.worker},
	}
	conns := make([]*RawConn, len(roles))
	for i := range roles {
		c, err := r.raw()
		if err != nil {
			return err
		}
		conns[i] = c
	}
	const ticks = 100 // writes per second per connection
	perTick := max(1, r.o.FuzzRate/ticks/len(roles))
	t := time.NewTicker(time.Second / ticks)
	defer t.Stop()
	end := time.Now().Add(r.o.FuzzDuration)
	f := &fuzzer{rng: rng}
	for time.Now().Before(end) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		for i, role := range roles {
			if conns[i].Closed() {
				continue
			}
			frames := make([][]byte, perTick)
			for k := range frames {
				frames[k] = f.frame(role.name, role.sender())
			}
			if err := conns[i].Write(frames...); err != nil {
				r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: the victim closed the connection: %v", role.name, err))
			}
		}
	}
	var first error
	for i, c := range conns {
		r.res.Extra["frames_"+roles[i].name+"_count"] = float64(c.Sent())
		r.res.Frames += c.Sent()
	}
	deadline := time.Now().Add(drainTimeout) // one bound for the three
	for _, c := range conns {
		if err := c.Drained(max(time.Until(deadline), time.Millisecond)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fuzzer draws hostile frames.
type fuzzer struct {
	rng *rand.Rand
}

func (f *fuzzer) frame(role string, sender ext.WorkerID) []byte {
	rng := f.rng
	switch p := rng.IntN(100); {
	case p < 3: // a forged event trigger
		body := `{"handle":` + U128(uint64(sender), uint64(rng.IntN(16))<<32|uint64(rng.IntN(16)+1)) + `,"poisoned":null}`
		return Frame(msgwire.FireAndForget, sender, 0, "_event_trigger", nil, []byte(body))
	case p < 8: // a staged singleton with a guessed tag
		tag := fmt.Sprintf("%d:%d:%d", f.epoch(), uint32(f.slot()), rng.IntN(100))
		return BatchFrame(sender, 0, nil, map[string]string{
			msgwire.StagedHandleHeader: U128(rng.Uint64(), rng.Uint64()), muxwire.SlotHeader: tag,
		})
	case p < 12: // bytes that do not decode
		b := f.batch(role)
		if len(b) > 0 {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			b = b[:rng.IntN(len(b)+1)]
		}
		return BatchFrame(sender, rng.IntN(muxwire.Lanes), b, nil)
	}
	lane := 0
	if rng.IntN(10) == 0 {
		lane = rng.IntN(muxwire.Lanes)
	}
	return BatchFrame(sender, lane, f.batch(role), nil)
}

func (f *fuzzer) epoch() uint64 {
	switch f.rng.IntN(6) {
	case 0:
		return math.MaxUint64
	case 1:
		return f.rng.Uint64()
	case 2:
		return 0
	default:
		return uint64(1 + f.rng.IntN(3))
	}
}

func (f *fuzzer) slot() muxwire.SlotID {
	if f.rng.IntN(8) == 0 {
		return muxwire.SlotID(f.rng.Uint32())
	}
	id, _ := muxwire.NewSlotID(uint32(f.rng.IntN(guessIndices)), uint8(f.rng.IntN(guessGens)))
	return id
}

// batch is a well-formed batch of random records; a role favours the
// records its side would send.
func (f *fuzzer) batch(role string) []byte {
	rng := f.rng
	lane := 0
	n := rng.IntN(24)
	return Batch(lane, f.epoch(), rng.Uint32(), func(e *muxwire.Encoder) error {
		for range n {
			slot, seq := f.slot(), rng.Uint32()
			if rng.IntN(2) == 0 {
				seq = uint32(rng.IntN(64))
			}
			t := rng.IntN(6)
			if role == "as-consumer" && rng.IntN(2) == 0 {
				t = []int{2, 3, 5}[rng.IntN(3)] // closes, credit, lifecycle
			}
			var err error
			switch t {
			case 0:
				body := wire.AppendBytesItem(nil, make([]byte, rng.IntN(128)))
				if rng.IntN(10) == 0 {
					body = []byte(wire.FinalizedFrame)
				}
				err = e.Data(slot, seq, body)
			case 1:
				err = e.OpenSlot(slot, seq, rng.Uint64()>>1, uint64(rng.IntN(100)))
			case 2:
				err = e.CloseSlot(slot, seq, muxwire.CloseReason(rng.IntN(4)))
			case 3:
				credit := uint32(rng.IntN(64))
				if rng.IntN(4) == 0 {
					credit = rng.Uint32()
				}
				err = e.CreditUpdate(slot, seq, credit)
			case 4:
				err = e.SlotHeartbeat(slot, seq)
			case 5:
				err = e.LifecycleSlot(slot, seq, uint64(rng.IntN(100)), muxwire.LifecycleAction(rng.IntN(2)))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
