package messenger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
)

// setStager installs transparent staging (nil removes it). Call it before
// the node takes traffic.
func (m *Messenger) setStager(s hook.Stager) {
	if s == nil {
		m.stager.Store(nil)
		return
	}
	m.stager.Store(&s)
}

func (m *Messenger) loadStager() hook.Stager {
	if p := m.stager.Load(); p != nil {
		return *p
	}
	return nil
}

// wouldStage reports whether stage would stage payload now: a stager is
// set and the payload is above its threshold.
func (m *Messenger) wouldStage(payload []byte) bool {
	st := m.loadStager()
	return st != nil && len(payload) > st.Threshold()
}

// stageRequest replaces a payload over the stager's threshold by a handle.
// It returns the headers to send (the caller's, without any _rv key of
// theirs, plus the staging keys), the payload to send and the handle, ""
// when nothing was staged. The stager keeps a copy of the payload: the
// call may return before the receiver has fetched it.
func (m *Messenger) stageRequest(ctx context.Context, rt msgwire.ResponseType, payload []byte, hb []byte, opts []CallOption) ([]byte, []byte, string, error) {
	hb, payload, handle, _, err := m.stage(ctx, rt, payload, hb, opts, false)
	return hb, payload, handle, err
}

// stageLent is stageRequest for a call that returns only after the
// receiver has answered, or once the caller gave up (Unary, Sync): a
// stager that can (hook.Lender) keeps the caller's payload itself, not a
// copy. withdraw is not nil when a payload was staged so; the call must
// run it before it returns, whatever the outcome, and run no Discard.
func (m *Messenger) stageLent(ctx context.Context, rt msgwire.ResponseType, payload []byte, hb []byte, opts []CallOption) (_ []byte, _ []byte, handle string, withdraw func(), err error) {
	return m.stage(ctx, rt, payload, hb, opts, true)
}

func (m *Messenger) stage(ctx context.Context, rt msgwire.ResponseType, payload []byte, hb []byte, opts []CallOption, lend bool) ([]byte, []byte, string, func(), error) {
	st := m.loadStager()
	if st == nil || len(payload) <= st.Threshold() {
		return hb, payload, "", nil, nil
	}
	h := map[string]string{}
	if len(opts) > 0 {
		co := new(callOptions)
		for _, o := range opts {
			o(co)
		}
		for k, v := range co.headers {
			h[k] = v
		}
	}
	var ttl time.Duration
	if dl, ok := ctx.Deadline(); ok && rt != msgwire.FireAndForget {
		ttl = time.Until(dl)
		if ttl <= 0 {
			return nil, nil, "", nil, ErrRequestTimeout
		}
		h[msgwire.StagedBudgetHeader] = strconv.FormatInt(int64((ttl+time.Millisecond-1)/time.Millisecond), 10)
	} else {
		delete(h, msgwire.StagedBudgetHeader)
	}
	var handle string
	var withdraw func()
	var err error
	if l, ok := st.(hook.Lender); ok && lend {
		handle, withdraw, err = l.StageLent(payload, ttl)
	} else {
		handle, err = st.Stage(payload, ttl)
	}
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("velo: stage a payload of %d bytes: %w", len(payload), err)
	}
	h[msgwire.StagedHandleHeader] = handle
	out, err := msgwire.EncodeHeaders(h)
	if err != nil {
		if withdraw != nil {
			withdraw()
		} else {
			st.Discard(handle)
		}
		return nil, nil, "", nil, err
	}
	return out, nil, handle, withdraw, nil
}

// stagingKey is the MessagePack form of "_rv" as a map key: a cheap test
// that rules out staging for almost every message before any decoding.
var stagingKey = []byte{0xa3, '_', 'r', 'v'}

// stagedHandle returns the _rv value of a request's headers, if any, and
// the budget it carries (0 when none).
func stagedHandle(hb []byte) (handle string, budget time.Duration, rest map[string]string, ok bool) {
	if len(hb) == 0 || !bytes.Contains(hb, stagingKey) {
		return "", 0, nil, false
	}
	h, err := msgwire.DecodeHeaders(hb)
	if err != nil {
		return "", 0, nil, false
	}
	handle, ok = h[msgwire.StagedHandleHeader]
	if !ok {
		return "", 0, nil, false
	}
	if v, has := h[msgwire.StagedBudgetHeader]; has {
		if ms, err := strconv.ParseUint(v, 10, 40); err == nil && ms > 0 {
			budget = time.Duration(ms) * time.Millisecond
		}
	}
	delete(h, msgwire.StagedHandleHeader)
	delete(h, msgwire.StagedBudgetHeader)
	return handle, budget, h, true
}

// resolveStaged fetches a staged request's payload, then hands the request
// to its handler with the payload in place and the staging headers gone.
// The request keeps its drain guard until it is answered or dropped. It
// runs on a goroutine of its own: one per staged request, which moves at
// least 256 KiB.
func (m *Messenger) resolveStaged(r *registered, j job, handle string, budget time.Duration, rest map[string]string) {
	st := m.loadStager()
	if st == nil {
		m.countFailure("dispatch", "no_stager")
		r.refuse(j, errors.New("velo: this node takes no staged payloads"))
		return
	}
	ctx := m.life
	var cancel context.CancelFunc
	bounded, ownBound := false, false
	switch {
	case budget > 0:
		ctx, cancel = context.WithTimeout(ctx, budget)
		bounded = true
	case st.FetchTimeout() > 0:
		ctx, cancel = context.WithTimeout(ctx, st.FetchTimeout())
		bounded, ownBound = true, true
	default:
		ctx, cancel = context.WithCancel(ctx)
	}
	payload, err := st.Fetch(ctx, handle, bounded)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	cancel()
	if err != nil && r.opts.stagedFailure != nil {
		r.opts.stagedFailure(ext.WorkerID(j.hdr.id.Lo), rest, err)
	}
	if err != nil {
		switch {
		case timedOut && !ownBound:
			// The caller's own timer has fired already; a reply could
			// only replace its timeout with another error.
			m.countFailure("dispatch", "staged_fetch_budget")
			j.done()
		case timedOut:
			m.countFailure("dispatch", "staged_fetch_timeout")
			r.refuse(j, fmt.Errorf("%w (%v): %v", msgerr.ErrStagedFetchTimeout, st.FetchTimeout(), err))
		default:
			m.countFailure("dispatch", "staged_fetch")
			r.refuse(j, fmt.Errorf("velo: fetch the staged payload of %q: %w", r.name, err))
		}
		return
	}
	hb, err := msgwire.EncodeHeaders(rest)
	if err != nil { // cannot happen: rest is a subset of headers that decoded
		r.refuse(j, err)
		return
	}
	j.hdr.headers = hb
	j.payload = payload // the read buffer stays the owner: the header lives in it
	j.hdr.fetched = true
	r.dispatch(j)
}

// recycleFetched gives a staged request's fetched payload back to the
// stager (hook.Recycler) once its handler has returned: a Context's
// Payload is the handler's only until then, and nothing else of the
// messenger keeps it. An answer that shares the payload's memory (an echo)
// is still to be written, so that payload is left to the collector.
func (m *Messenger) recycleFetched(payload, resp []byte) {
	if len(payload) == 0 || hook.Overlaps(payload, resp) {
		return
	}
	if rc, ok := m.loadStager().(hook.Recycler); ok {
		rc.Recycle(payload)
	}
}

// stagingThreshold is the payload size above which this node stages what
// it sends, or 0 when it stages nothing.
func (m *Messenger) stagingThreshold() int {
	if st := m.loadStager(); st != nil {
		return st.Threshold()
	}
	return 0
}
