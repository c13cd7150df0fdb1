package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The two loops of a response-plane run that both modes share: the
// engine's continuous batching (rpEngine) and the frontend's reading of
// each response (rpTimes). In-process they run in one process with a clock
// since a shared base; under --procs they run in the children with the
// wall clock, which every process on the host shares.

// rpTimes are the latencies the frontends record, by request index, on
// the clock now that the engines stamp their tokens with.
type rpTimes struct {
	cfg                      ResponsePlaneConfig
	now                      func() int64
	dispatched, ttft, tokLat []int64
}

func newRPTimes(cfg ResponsePlaneConfig, now func() int64) *rpTimes {
	n, T := cfg.Requests, cfg.Tokens
	return &rpTimes{cfg: cfg, now: now, dispatched: make([]int64, n), ttft: make([]int64, n), tokLat: make([]int64, n*T)}
}

// open records request i's dispatch time and opens its stream on frontend
// h of fronts towards engine e. Its consumer checks every token, records
// the latencies, tells setErr what went wrong and is counted in consumers.
func (t *rpTimes) open(ctx context.Context, fronts rpFrontends, i, h, e int, consumers *sync.WaitGroup, setErr func(error)) (any, error) {
	consumers.Add(1)
	t.dispatched[i] = t.now()
	req, err := fronts.open(ctx, i, h, e, func(next func() ([]byte, error)) error {
		defer consumers.Done()
		err := t.consume(i, next)
		if err != nil {
			setErr(err)
		}
		return err
	})
	if err != nil {
		consumers.Done()
		return nil, fmt.Errorf("request %d: open: %w", i, err)
	}
	return req, nil
}

// consume reads request i's response with next: every token must be its
// request's, at its position, of its size, and there must be Tokens of
// them.
func (t *rpTimes) consume(i int, next func() ([]byte, error)) error {
	T := t.cfg.Tokens
	for pos := 0; ; pos++ {
		p, err := next()
		if errors.Is(err, io.EOF) {
			if pos != T {
				return fmt.Errorf("request %d: %d tokens, want %d", i, pos, T)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("request %d, token %d: %w", i, pos, err)
		}
		at := t.now()
		stamp, err := rpCheckToken(i, pos, p)
		if err != nil {
			return err
		}
		if pos == 0 {
			t.ttft[i] = at - t.dispatched[i]
		}
		if pos < T {
			t.tokLat[i*T+pos] = at - stamp
		}
	}
}

// rpCheckToken checks that p is token pos of request i, of its size, and
// returns the time the engine stamped on it.
func rpCheckToken(i, pos int, p []byte) (stamp int64, err error) {
	if len(p) != rpTokenBytes {
		return 0, fmt.Errorf("request %d: token of %d bytes", i, len(p))
	}
	idx, got := binary.BigEndian.Uint64(p), int(binary.BigEndian.Uint32(p[8:]))
	if idx != uint64(i) || got != pos {
		return 0, fmt.Errorf("request %d: got token %d of request %d at position %d", i, got, idx, pos)
	}
	return int64(binary.BigEndian.Uint64(p[12:])), nil
}

// rpQueued is a dispatched request on an engine's queue.
type rpQueued struct {
	idx int
	req any
}

// rpEngine is one engine's continuous batching loop: admit queued requests
// up to MaxBatch, then one forward pass puts one token on every active
// stream, finishes the streams that reached Tokens, ends the pass, and
// waits PassDelay.
func rpEngine(ctx context.Context, cfg ResponsePlaneConfig, plane rpEngines, e int, queue <-chan rpQueued, now func() int64) error {
	type active struct {
		st  rpStream
		idx uint64
		pos int
	}
	batch := make([]active, 0, cfg.MaxBatch)
	open := true
	admit := func(q rpQueued) error {
		st, err := plane.bind(ctx, e, q.req)
		if err != nil {
			return fmt.Errorf("request %d: bind: %w", q.idx, err)
		}
		batch = append(batch, active{st: st, idx: uint64(q.idx)})
		return nil
	}
	for open || len(batch) > 0 {
		// Admission: wait only when the batch is empty.
	admitting:
		for open && len(batch) < cfg.MaxBatch {
			if len(batch) == 0 {
				select {
				case q, ok := <-queue:
					if !ok {
						open = false
						break admitting
					}
					if err := admit(q); err != nil {
						return err
					}
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				continue
			}
			select {
			case q, ok := <-queue:
				if !ok {
					open = false
					break admitting
				}
				if err := admit(q); err != nil {
					return err
				}
			default:
				break admitting
			}
		}
		if len(batch) == 0 {
			continue
		}
		// One forward pass.
		for j := range batch {
			a := &batch[j]
			tok := make([]byte, rpTokenBytes) // grpc may hold a sent message: a fresh buffer per token
			binary.BigEndian.PutUint64(tok, a.idx)
			binary.BigEndian.PutUint32(tok[8:], uint32(a.pos))
			binary.BigEndian.PutUint64(tok[12:], uint64(now()))
			if err := a.st.send(ctx, tok); err != nil {
				return fmt.Errorf("request %d, token %d: %w", a.idx, a.pos, err)
			}
			a.pos++
		}
		kept := batch[:0]
		for _, a := range batch {
			if a.pos < cfg.Tokens {
				kept = append(kept, a)
				continue
			}
			if err := a.st.finish(); err != nil {
				return fmt.Errorf("request %d: finish: %w", a.idx, err)
			}
		}
		clear(batch[len(kept):])
		batch = kept
		plane.pass(e)
		if cfg.PassDelay > 0 {
			time.Sleep(cfg.PassDelay)
		}
	}
	return nil
}
