package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
)

// Case is one attack of issue 20, with the legit work it must not harm.
type Case struct {
	Name  string
	Issue string // the issue's measurement it repeats, in a few words

	In, Out bool // legit streams into the victim (it consumes), out of it (it produces)
	// Unpaced producers send as fast as credit lets them; PauseConsumers
	// makes the consumers read nothing while the attack runs. Together they
	// show what a credit forgery makes a consumer buffer.
	Unpaced, PauseConsumers bool
	// Answered: every request of the attack is one the protocol answers
	// (Bounds.AnsweredCPUPerFrameUS).
	Answered bool
	// Control cases attack nothing: they measure the floor, and nothing
	// has to be refused.
	Control bool

	Setup  func(context.Context, *run) error
	Attack func(context.Context, *run) error
	// Check runs after the windows and returns what the attack harmed
	// besides the legit streams.
	Check func(context.Context, *run) []string
}

// Cases lists every case: the two controls first, then the issue's in its
// order, the fuzzer last.
func Cases() []*Case {
	return []*Case{
		controlCase(), controlAnswered(), forgedCloseAsProducer(), epochMaxAsProducer(), forgedCreditAsConsumer(), forgedCloseAsConsumer(),
		forgedEventTrigger(), creditIgnoringProducer(), strangerOpenSlot(1, "stranger-openslot"),
		strangerOpenSlot(2000, "stranger-openslot-2000-ids"), guessedRvPayload(), guessedRvTransfer(),
		guessedMuxSlotTag(), hostileOwnerCase(), fuzzCase(),
	}
}

// controlCase attacks nothing: its figures are the floor the harness
// itself measures (the legit streams and the control channel).
func controlCase() *Case {
	return &Case{
		Name:    "control",
		Control: true,
		Issue:   "no attack: what the measurement itself reads",
		In:      true,
		Out:     true,
		Attack:  func(context.Context, *run) error { return nil },
	}
}

// controlAnswered makes 1,024 ordinary unary calls from a greeted peer,
// 64 in flight, as the thieves below do, to a handler that answers at
// once: what any answered request costs the victim, the floor under the
// cases whose guesses are answered.
func controlAnswered() *Case {
	return &Case{
		Name:     "control-answered",
		Answered: true,
		Control:  true,
		Issue:    "no attack: 1,024 answered calls, the floor of an answered request",
		In:       true,
		Attack: func(ctx context.Context, r *run) error {
			t, err := r.thief(ctx)
			if err != nil {
				return err
			}
			defer r.thiefDone(t)
			t.guess(r.scaled(1024), func(int) { t.call(ctx, "_list_handlers", nil) })
			return nil
		},
	}
}

// CaseByName finds a case of Cases.
func CaseByName(name string) (*Case, bool) {
	for _, c := range Cases() {
		if c.Name == name {
			return c, true
		}
	}
	return nil, false
}

// What an attacker guesses: the values the two ends of a stream share come
// from counters that start small. A fresh node's first batcher to a peer
// runs in epoch 1; its slots are indices 0, 1, 2… at generation 0 (a
// generation moves when an index is reused); the consumer hands out
// routing sessions 1, 2, 3…; an owner's event slots and rendezvous ids
// start at 0 and 1. The guesses cover those ranges with room to spare.
const (
	guessEpoch   = 1
	guessIndices = 32
	guessGens    = 4
)

// guessedSlots are guessIndices slot ids at generation gen.
func guessedSlots(gen uint8) []muxwire.SlotID {
	ids := make([]muxwire.SlotID, 0, guessIndices)
	for i := range uint32(guessIndices) {
		id, _ := muxwire.NewSlotID(i, gen)
		ids = append(ids, id)
	}
	return ids
}

// perGeneration builds one frame per guessed generation, each with a
// record for every guessed index.
func perGeneration(sender ext.WorkerID, epoch uint64, rec func(e *muxwire.Encoder, id muxwire.SlotID) error) [][]byte {
	var frames [][]byte
	for g := range uint8(guessGens) {
		batch := Batch(0, epoch, uint32(g)+1000, func(e *muxwire.Encoder) error {
			for _, id := range guessedSlots(g) {
				if err := rec(e, id); err != nil {
					return err
				}
			}
			return nil
		})
		frames = append(frames, BatchFrame(sender, 0, batch, nil))
	}
	return frames
}

// ---- posing as a stream's producer ----

func forgedCloseAsProducer() *Case {
	return &Case{
		Name:  "forged-close-as-producer",
		Issue: "a forged CloseSlot batch posing as the producer ended all 20 of its live streams",
		In:    true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			frames := perGeneration(r.legit.worker(), guessEpoch, func(e *muxwire.Encoder, id muxwire.SlotID) error {
				return e.CloseSlot(id, 0, muxwire.TerminalSent)
			})
			return r.flood(c, r.scaled(4000), frames...)
		},
	}
}

func epochMaxAsProducer() *Case {
	return &Case{
		Name:  "epoch-max-as-producer",
		Issue: "an empty batch with epoch 2^64-1 posing as the producer ended its streams and locked it out",
		In:    true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			f := BatchFrame(r.legit.worker(), 0, Batch(0, math.MaxUint64, 1, nil), nil)
			return r.flood(c, r.scaled(20000), f)
		},
		// The real producer's next streams must get all their tokens.
		Check: func(ctx context.Context, r *run) []string {
			return laterStreams(ctx, r, "later", 5, 100)
		},
	}
}

// laterStreams opens n new streams from the legit peer into the victim,
// each of count items, and reports those that did not arrive whole.
func laterStreams(ctx context.Context, r *run, set string, n, count int) []string {
	var ca consumeAnswer
	if err := r.victim.do(ctx, "consume", consumeArgs{Set: set, N: n}, &ca); err != nil {
		return []string{"later streams: " + err.Error()}
	}
	if err := r.legit.do(ctx, "produce", produceArgs{Set: set, Handles: ca.Handles, Payload: r.o.Payload, Count: count}, nil); err != nil {
		return []string{"later streams: " + err.Error()}
	}
	ok, probs, err := endSet(ctx, streamSet{name: set, producer: r.legit, consumer: r.victim}, 3*time.Second)
	if err != nil {
		return []string{"later streams: " + err.Error()}
	}
	r.res.Extra["later_streams_ok_count"] = float64(ok)
	if ok == n {
		return nil
	}
	out := []string{fmt.Sprintf("later streams of the real producer: %d of %d arrived whole", ok, n)}
	if len(probs) > 0 {
		out = append(out, "later "+probs[0])
	}
	return out
}

// ---- posing as a stream's consumer ----

func forgedCreditAsConsumer() *Case {
	return &Case{
		Name:    "forged-credit-as-consumer",
		Issue:   "forged CreditUpdates posing as the consumer grew the consumer's heap by 1.2-1.5 GiB in 2 s",
		Out:     true,
		Unpaced: true, PauseConsumers: true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			frames := perGeneration(r.legit.worker(), guessEpoch, func(e *muxwire.Encoder, id muxwire.SlotID) error {
				return e.CreditUpdate(id, 0, 1<<24)
			})
			if err := r.flood(c, r.scaled(4000), frames...); err != nil {
				return err
			}
			// The forged credit lets the producers run: give them a moment
			// to spend it, as the issue's 2 s did.
			time.Sleep(time.Second) // part of the attack window being measured
			return nil
		},
	}
}

func forgedCloseAsConsumer() *Case {
	return &Case{
		Name:  "forged-close-as-consumer",
		Issue: "forged CloseSlots posing as the consumer cancelled the producer's streams; their consumers waited for the watchdog",
		Out:   true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			frames := perGeneration(r.legit.worker(), guessEpoch, func(e *muxwire.Encoder, id muxwire.SlotID) error {
				return e.CloseSlot(id, 0, muxwire.UnknownSlot)
			})
			return r.flood(c, r.scaled(4000), frames...)
		},
	}
}

// ---- events ----

func forgedEventTrigger() *Case {
	return &Case{
		Name:  "forged-event-trigger",
		Issue: "a forged _event_trigger made a remote Wait return success on an event nobody triggered",
		In:    true,
		Setup: func(ctx context.Context, r *run) error {
			var ev eventArgs
			if err := r.legit.do(ctx, "event_new", nil, &ev); err != nil {
				return err
			}
			r.vars["event"] = ev.Handle
			return r.victim.do(ctx, "event_wait", ev, nil)
		},
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			// Handles of the legit owner: slot indices 0-15, generations 1-16.
			owner := uint64(r.legit.worker())
			var frames [][]byte
			for idx := range uint64(16) {
				for gen := uint64(1); gen <= 16; gen++ {
					body := `{"handle":` + U128(owner, idx<<32|gen) + `,"poisoned":null}`
					frames = append(frames, Frame(msgwire.FireAndForget, r.legit.worker(), 0, "_event_trigger", nil, []byte(body)))
				}
			}
			return r.flood(c, r.scaled(4096), frames...)
		},
		Check: func(ctx context.Context, r *run) []string {
			h := r.vars["event"].(events.Handle)
			var st eventStatus
			if err := r.victim.do(ctx, "event_status", eventArgs{Handle: h}, &st); err != nil {
				return []string{"event: " + err.Error()}
			}
			var out []string
			if st.Done {
				out = append(out, fmt.Sprintf("the victim's Wait on an untriggered event returned (err %q)", st.Err))
				r.res.Extra["forged_wait_completed_count"] = 1
				return out
			}
			if err := r.legit.do(ctx, "event_trigger", eventArgs{Handle: h}, nil); err != nil {
				return []string{"event: the owner's trigger: " + err.Error()}
			}
			if err := r.victim.do(ctx, "event_result", eventArgs{Handle: h}, &st); err != nil {
				return []string{"event: " + err.Error()}
			}
			if !st.Done || st.Err != "" {
				out = append(out, fmt.Sprintf("the real trigger did not end the Wait cleanly: %+v", st))
			}
			return out
		},
	}
}

// ---- a real producer that ignores credit ----

func creditIgnoringProducer() *Case {
	return &Case{
		Name:  "credit-ignoring-producer",
		Issue: "a properly attached producer that ignores credit made the consumer buffer 22.8 MiB at credit 32",
		In:    true,
		Setup: func(ctx context.Context, r *run) error {
			var ca consumeAnswer
			// A consumer that reads nothing: what it holds is what the
			// producer pushed past its credit.
			if err := r.victim.do(ctx, "consume", consumeArgs{Set: "rogue", N: 1, Paused: true}, &ca); err != nil {
				return err
			}
			m, err := r.rogue(ctx, nil)
			if err != nil {
				return err
			}
			session, credit, err := rogueAttach(ctx, m, r.victim.info().InstanceID, ca.Handles[0])
			if err != nil {
				return err
			}
			r.vars["rogue"], r.vars["anchor"], r.vars["session"] = m, ca.Handles[0], session
			r.res.Extra["granted_credit_count"] = float64(credit)
			return nil
		},
		Attack: func(ctx context.Context, r *run) error {
			m := r.vars["rogue"].(*messenger.Messenger)
			anchor := r.vars["anchor"].(wire.AnchorHandle)
			session := r.vars["session"].(uint64)
			victim := r.victim.info().InstanceID
			slot, _ := muxwire.NewSlotID(1, 0)
			item := wire.AppendBytesItem(nil, make([]byte, 1024))
			const perBatch = 56 // about 58 KiB: under the 60 KiB a batcher cuts at
			total := r.scaled(40 * perBatch * 16)
			seq, i := uint32(1), 0
			for ; seq <= uint32(total); i++ {
				batch := Batch(0, 1, uint32(i)+1, func(e *muxwire.Encoder) error {
					if i == 0 {
						if err := e.OpenSlot(slot, 0, anchor.LocalID(), session); err != nil {
							return err
						}
					}
					for k := 0; k < perBatch && seq <= uint32(total); k++ {
						if err := e.Data(slot, seq, item); err != nil {
							return err
						}
						seq++
					}
					return nil
				})
				if err := m.Send(ctx, victim, muxwire.HandlerName(0), batch); err != nil {
					return err
				}
			}
			// What the victim refuses is records: count those.
			r.res.Frames, r.res.Unit = int64(seq-1), "records"
			r.res.Extra["batches_count"] = float64(i)
			return fence(ctx, m, victim)
		},
	}
}

// ---- a stranger's OpenSlot: the reject loop ----

func strangerOpenSlot(ids int, name string) *Case {
	issue := "one made-up OpenSlot (91 bytes) from a stranger pinned the victim at 100% CPU"
	if ids > 1 {
		issue = "the same from 2,000 forged worker ids took both cores"
	}
	return &Case{
		Name:  name,
		Issue: issue,
		In:    true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			frames := make([][]byte, ids)
			for i := range frames {
				stranger := ext.WorkerID(0x5eed_0000_0000_0000 | uint64(i+1))
				slot, _ := muxwire.NewSlotID(0, 0)
				batch := Batch(0, 1, 1, func(e *muxwire.Encoder) error { return e.OpenSlot(slot, 0, 0xabc, 0xdef) })
				frames[i] = BatchFrame(stranger, 0, batch, nil)
			}
			r.res.Extra["frame_bytes"] = float64(len(frames[0]))
			return r.flood(c, ids, frames...)
		},
	}
}

// ---- guessed rendezvous ids ----

// thief is a peer never given a handle, guessing the victim's. It keeps
// 64 guesses in flight, as an attacker would: one at a time, every guess
// would wake an idle victim, and the figure would be the cost of the wake.
type thief struct {
	m      *messenger.Messenger
	victim ext.InstanceID
	owner  uint64
	stolen atomic.Int64
	sent   atomic.Int64
}

const thiefInFlight = 64

// call is one unary guess.
func (t *thief) call(ctx context.Context, handler string, body any) ([]byte, error) {
	t.sent.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, _ := json.Marshal(body)
	return t.m.Unary(ctx, t.victim, handler, b)
}

// guess runs one(i) for i in [0, n), thiefInFlight at a time.
func (t *thief) guess(n int, one func(i int)) {
	sem := make(chan struct{}, thiefInFlight)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			one(i)
		}()
	}
	wg.Wait()
}

func (t *thief) pull(ctx context.Context, transfer uint64, chunk uint32) {
	b, err := t.call(ctx, rendezvous.HandlerPull, map[string]any{"transfer_id": transfer, "chunk_index": chunk})
	if err == nil {
		t.stolen.Add(int64(len(b)))
	}
}

func (r *run) thief(ctx context.Context) (*thief, error) {
	m, err := r.rogue(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &thief{m: m, victim: r.victim.info().InstanceID, owner: uint64(r.victim.worker())}, nil
}

func (r *run) thiefDone(t *thief) {
	r.res.Frames += t.sent.Load()
	r.res.Extra["stolen_bytes"] = float64(t.stolen.Load())
}

func guessedRvPayload() *Case {
	return &Case{
		Name:     "guessed-rv-payload",
		Answered: true,
		Issue:    "a peer never given a handle read another request's staged payload at its first guess",
		In:       true,
		Setup: func(ctx context.Context, r *run) error {
			var a rvAnswer
			if err := r.victim.do(ctx, "rv_register", rvRegisterArgs{Size: 1 << 20}, &a); err != nil {
				return err
			}
			r.vars["rv"] = a
			return nil
		},
		Attack: func(ctx context.Context, r *run) error {
			t, err := r.thief(ctx)
			if err != nil {
				return err
			}
			defer r.thiefDone(t)
			// Slot ids 1, 2, 3…: the payload staged is at the first guess.
			t.guess(r.scaled(1024), func(i int) {
				h := rendezvous.DataHandle{Hi: t.owner, Lo: uint64(i + 1)}
				raw, err := t.call(ctx, rendezvous.HandlerAcquire, map[string]any{"handle": h})
				if err != nil {
					return
				}
				var ans acquireAnswer
				if json.Unmarshal(raw, &ans) == nil && ans.Ready != nil {
					t.pull(ctx, ans.Ready.TransferID, 0)
				}
			})
			return nil
		},
		Check: func(ctx context.Context, r *run) []string {
			return r.stolenOrBroken(ctx, "rv_get", rvFetchArgs{Handle: r.vars["rv"].(rvAnswer).Handle, Sum: r.vars["rv"].(rvAnswer).Sum})
		},
	}
}

// stolenOrBroken reports bytes a thief got and a legit fetch that failed.
func (r *run) stolenOrBroken(ctx context.Context, op string, a rvFetchArgs) []string {
	var out []string
	if n := r.res.Extra["stolen_bytes"]; n > 0 {
		out = append(out, fmt.Sprintf("a peer never given the handle read %.0f bytes of the staged payload", n))
	}
	var fa rvFetchAnswer
	if err := r.legit.do(ctx, op, a, &fa); err != nil {
		return append(out, "the legit fetch: "+err.Error())
	}
	if !fa.OK {
		out = append(out, "the legit fetch failed: "+fa.Err)
	}
	return out
}

func guessedRvTransfer() *Case {
	return &Case{
		Name:     "guessed-rv-transfer",
		Answered: true,
		Issue:    "a peer never given a handle pulled a transfer in progress and ended its lease",
		In:       true,
		Setup: func(ctx context.Context, r *run) error {
			var a rvAnswer
			if err := r.victim.do(ctx, "rv_register", rvRegisterArgs{Size: 16 << 20}, &a); err != nil {
				return err
			}
			r.vars["rv"] = a
			// 32 chunks, 40 ms apart: the transfer runs through the attack.
			return r.legit.do(ctx, "rv_slow_start", rvFetchArgs{Handle: a.Handle, Sum: a.Sum, GapMS: 40}, nil)
		},
		Attack: func(ctx context.Context, r *run) error {
			t, err := r.thief(ctx)
			if err != nil {
				return err
			}
			defer r.thiefDone(t)
			// Transfer and lease ids come from the counter the slot ids
			// come from: the legit transfer is at the second guess.
			n := r.scaled(1024)
			t.guess(n, func(i int) { t.pull(ctx, uint64(i+1), 0) })
			for i := range n {
				lo, lease := uint64(i%4+1), uint64(i/4+1)
				b, _ := json.Marshal(map[string]any{"handle": rendezvous.DataHandle{Hi: t.owner, Lo: lo}, "lease_id": lease})
				t.sent.Add(1)
				t.m.Send(ctx, t.victim, rendezvous.HandlerRelease, b)
			}
			return fence(ctx, t.m, t.victim)
		},
		Check: func(ctx context.Context, r *run) []string {
			a := r.vars["rv"].(rvAnswer)
			return r.stolenOrBroken(ctx, "rv_slow_result", rvFetchArgs{Handle: a.Handle, Sum: a.Sum})
		},
	}
}

// ---- guessed _mux_slot tags ----

func guessedMuxSlotTag() *Case {
	return &Case{
		Name:  "guessed-mux-slot-tag",
		Issue: "5,120 guessed _mux_slot frames ended 20 of 20 streams",
		In:    true,
		Attack: func(ctx context.Context, r *run) error {
			c, err := r.raw()
			if err != nil {
				return err
			}
			// A staged singleton whose payload nobody holds (its owner is
			// no peer of the victim), so the fetch fails and the tag names
			// the stream to end.
			handle := U128(0x0bad_0000_0000_0001, 1)
			var frames [][]byte
			for idx := range uint32(guessIndices) {
				for gen := range uint8(2) {
					id, _ := muxwire.NewSlotID(idx, gen)
					for session := uint64(1); session <= 80; session++ {
						tag := fmt.Sprintf("%d:%d:%d", guessEpoch, uint32(id), session)
						frames = append(frames, BatchFrame(r.legit.worker(), 0, nil, map[string]string{
							msgwire.StagedHandleHeader: handle, muxwire.SlotHeader: tag,
						}))
					}
				}
			}
			return r.flood(c, r.scaled(len(frames)), frames...)
		},
	}
}

// ---- a hostile owner states a huge staged payload ----

func hostileOwnerCase() *Case {
	return &Case{
		Name:  "hostile-owner-1tib",
		Issue: "a hostile owner stating a 1 TiB staged payload killed a node built with defaults (out of memory)",
		In:    true,
		Attack: func(ctx context.Context, r *run) error {
			owner := &hostileOwner{stated: 1 << 40, realChunks: 1}
			m, err := r.rogue(ctx, owner.setup)
			if err != nil {
				return err
			}
			owner.stageAll(m)
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			r.res.Frames++
			_, err = m.Unary(ctx, r.victim.info().InstanceID, "work", []byte("x"))
			r.res.Extra["pulls_served_count"] = float64(owner.pulls.Load())
			if err == nil {
				r.res.Notes = append(r.res.Notes, "the victim ran the request on a payload it could not have fetched")
			}
			return nil
		},
	}
}
