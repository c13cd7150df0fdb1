package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
)

// Options set how a case runs. The zero value of a field takes its default.
type Options struct {
	Streams int // legit streams per direction a case uses (20)
	PaceUS  int // a legit producer sends one item per stream this often (20,000 µs)
	Payload int // bytes per legit item (64)
	// Scale multiplies the number of frames of the flood cases (1).
	Scale float64
	// Baseline is the window over which the victim's CPU with the legit
	// streams alone is measured (300 ms).
	Baseline time.Duration
	// Settle is how soon after the attack the victim must be idle again
	// (1 s, the bound); IdleWindow is how long it is watched then
	// (500 ms).
	Settle, IdleWindow time.Duration
	// FuzzDuration and FuzzRate set the fuzzer: how long it sends and how
	// many frames a second (3 s, 10,000).
	FuzzDuration time.Duration
	FuzzRate     int
	Seed         int64 // of the fuzzer; 0 draws one
	// Log gets a line per step; Echo gets the nodes' stderr as it comes.
	// Either may be nil.
	Log, Echo io.Writer
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Streams, 20)
	def(&o.PaceUS, 20_000)
	def(&o.Payload, 64)
	def(&o.FuzzRate, 10_000)
	if o.Scale == 0 {
		o.Scale = 1
	}
	for _, d := range []struct {
		v *time.Duration
		d time.Duration
	}{{&o.Baseline, 300 * time.Millisecond}, {&o.Settle, time.Second}, {&o.IdleWindow, 500 * time.Millisecond}, {&o.FuzzDuration, 3 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.d
		}
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	return o
}

// Bounds are the limits on what an attack may cost the victim.
type Bounds struct {
	CPUPerFrameUS float64 // victim CPU per hostile frame
	// AnsweredCPUPerFrameUS is the bound per request in the cases whose
	// every request the protocol answers (a unary guess gets an error
	// response): any answered call costs the victim a handler run and a
	// reply write, 11-17 µs on the development VM (the control-answered
	// case), so 5 µs cannot hold there whether or not the guess is refused.
	AnsweredCPUPerFrameUS float64
	IdleCores             float64 // victim CPU after the attack, in cores
	HeapPerConn           int64   // live heap growth per hostile connection
	// A zero CPU or idle bound is not checked: tests assert what the
	// victim did and kept, the harness (velo bench hostile) reports speed.
}

// DefaultBounds are the issue's: 5 µs per frame (50 µs under the race
// detector, which slows every instrumented step about tenfold), 1% of a
// core once the attack stopped, 1 MiB per hostile connection; and 25 µs
// per answered request (250 µs under the race detector).
func DefaultBounds() Bounds {
	b := Bounds{CPUPerFrameUS: 5, AnsweredCPUPerFrameUS: 25, IdleCores: 0.01, HeapPerConn: 1 << 20}
	if RaceEnabled {
		b.CPUPerFrameUS *= 10
		b.AnsweredCPUPerFrameUS *= 10
	}
	return b
}

// Result is what one case measured.
type Result struct {
	Case   string
	Frames int64  // hostile frames (or requests) the attacker sent
	Unit   string // what Frames counts when not frames (records, for a producer past its credit)
	// Answered: the protocol answers each of the attacker's requests, and
	// Bounds.AnsweredCPUPerFrameUS applies.
	Answered bool
	Control  bool // a control case: nothing to refuse
	Conns    int  // hostile connections (raw, or rogue peers)

	AttackNS      int64   // the attack window, on the victim's clock
	BaselineCores float64 // the victim's CPU with the legit traffic alone
	AttackCPUNS   int64   // the victim's CPU over the attack, less the baseline
	NoiseNS       int64   // what the estimate of the legit CPU in the attack window may be off by
	CPUPerFrameUS float64
	IdleCores     float64 // the victim's CPU in the window Settle after the attack
	IdleStartNS   int64   // how long after the attack that window started

	HeapGrowth     int64  // the largest live-heap growth over the attack, of either node
	HeapGrowthNode string // which node it was
	GoroutineDelta int    // the victim's goroutines at the end of the attack, less at its start
	ControlRTTMS   float64

	LegitStreams, LegitOK int
	LegitProblems         []string // legit work the attack harmed

	Refusals map[string]float64 // victim counters that name a refusal, by how much they moved
	Symptoms map[string]float64 // other victim counters that moved (epoch deaths, watchdog firings)

	VictimDied   bool
	DeathNote    string
	Unresponsive string             // which node stopped answering its control channel, and at what
	Extra        map[string]float64 // the case's own figures
	Notes        []string
}

// Failures lists the bounds r breaks; empty means the case was refused as
// the issue asks.
func (r *Result) Failures(b Bounds) []string {
	var f []string
	if r.VictimDied {
		f = append(f, "the victim died: "+r.DeathNote)
	}
	if r.LegitOK < r.LegitStreams {
		f = append(f, fmt.Sprintf("%d of %d legit streams harmed", r.LegitStreams-r.LegitOK, r.LegitStreams))
	}
	for _, p := range r.LegitProblems {
		if !strings.HasPrefix(p, "stream ") {
			f = append(f, p)
		}
	}
	if r.Unresponsive != "" {
		f = append(f, r.Unresponsive)
	}
	if r.VictimDied || r.Unresponsive != "" {
		return f
	}
	bound := b.CPUPerFrameUS
	if r.Answered {
		bound = b.AnsweredCPUPerFrameUS
	}
	if allowed := int64(bound*1e3*float64(r.Frames)) + r.NoiseNS; bound > 0 && r.AttackCPUNS > allowed {
		f = append(f, fmt.Sprintf("victim CPU %.1f µs per %s over %d, bound %.0f µs (%.1f ms allowed in all, %.1f ms of it for measurement noise)",
			r.CPUPerFrameUS, r.unit(), r.Frames, bound, float64(allowed)/1e6, float64(r.NoiseNS)/1e6))
	}
	if b.IdleCores > 0 && r.IdleCores > b.IdleCores {
		f = append(f, fmt.Sprintf("victim at %.1f%% of a core %v after the attack, bound %.0f%%", 100*r.IdleCores, time.Duration(r.IdleStartNS).Round(time.Millisecond), 100*b.IdleCores))
	}
	if limit := b.HeapPerConn * int64(max(r.Conns, 1)); r.HeapGrowth > limit {
		f = append(f, fmt.Sprintf("%s heap grew %s, bound %s", r.HeapGrowthNode, mib(r.HeapGrowth), mib(limit)))
	}
	if len(r.Refusals) == 0 && !r.Control {
		f = append(f, "no counter names what was refused")
	}
	return f
}

func (r *Result) unit() string {
	if r.Unit != "" {
		return strings.TrimSuffix(r.Unit, "s")
	}
	return "frame"
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// run is one case in progress: its processes and what the attack uses.
type run struct {
	o      Options
	c      *Case
	victim *proc
	legit  *proc
	res    *Result

	sets   []streamSet
	raws   []*RawConn
	rogues []*messenger.Messenger
	vars   map[string]any // what a case's setup hands its attack and check
	began  time.Time
}

// streamSet is one direction of legit streams.
type streamSet struct {
	name               string
	producer, consumer *proc
	paused             bool // the consumers read nothing during the attack
}

func (r *run) logf(format string, args ...any) {
	if r.o.Log != nil {
		fmt.Fprintf(r.o.Log, "%s +%v: %s\n", r.c.Name, time.Since(r.began).Round(time.Millisecond), fmt.Sprintf(format, args...))
	}
}

// raw dials a hostile connection to the victim.
func (r *run) raw() (*RawConn, error) {
	c, err := DialRaw(r.victim.info())
	if err != nil {
		return nil, err
	}
	r.raws = append(r.raws, c)
	r.res.Conns++
	return c, nil
}

// rogue starts a hostile peer with its own identity.
func (r *run) rogue(ctx context.Context, setup func(*messenger.Messenger) error) (*messenger.Messenger, error) {
	m, err := newRogue(ctx, r.victim.info(), setup)
	if err != nil {
		return nil, err
	}
	r.rogues = append(r.rogues, m)
	r.res.Conns++
	return m, nil
}

// flood writes frames on c, cycling through them until n are written,
// and waits until the victim has read them.
func (r *run) flood(c *RawConn, n int, frames ...[]byte) error {
	batch := make([][]byte, 0, 1024)
	for i := 0; i < n; i++ {
		batch = append(batch, frames[i%len(frames)])
		if len(batch) == cap(batch) || i == n-1 {
			if err := c.Write(batch...); err != nil {
				r.res.Notes = append(r.res.Notes, fmt.Sprintf("the victim closed the hostile connection after %d frames: %v", c.Sent(), err))
				break
			}
			batch = batch[:0]
		}
	}
	r.res.Frames += c.Sent()
	return c.Drained(drainTimeout)
}

// drainTimeout bounds the wait for a victim to read an attack's bytes; a
// victim that takes longer is too busy to read, which the figures show.
const drainTimeout = 10 * time.Second

// scaled is n frames times Options.Scale, at least 1.
func (r *run) scaled(n int) int { return max(1, int(float64(n)*r.o.Scale)) }

// Run runs one case between fresh processes and returns its figures. An
// error means the case could not run (a node would not start, a legit
// stream would not attach), not that the attack succeeded.
func Run(ctx context.Context, spawn Spawn, c *Case, o Options) (res Result, err error) {
	o = o.withDefaults()
	r := &run{o: o, c: c, res: &Result{Case: c.Name, Answered: c.Answered, Control: c.Control, Extra: map[string]float64{}}, vars: map[string]any{}, began: time.Now()}
	defer r.cleanup()
	legit := make(chan error, 1)
	go func() {
		var err error
		r.legit, err = startProc(ctx, spawn, "legit", o.Echo)
		legit <- err
	}()
	r.victim, err = startProc(ctx, spawn, "victim", o.Echo)
	if lerr := <-legit; err == nil {
		err = lerr
	}
	if err != nil {
		return res, err
	}
	r.logf("nodes up")
	if err := r.victim.do(ctx, "register", registerArgs{Peer: r.legit.info()}, nil); err != nil {
		return res, err
	}
	if err := r.legit.do(ctx, "register", registerArgs{Peer: r.victim.info()}, nil); err != nil {
		return res, err
	}
	if err := r.startStreams(ctx); err != nil {
		return res, err
	}
	r.logf("legit streams running")
	if c.Setup != nil {
		if err := c.Setup(ctx, r); err != nil {
			return res, fmt.Errorf("setup: %w", err)
		}
	}
	err = r.measure(ctx)
	r.noteHung()
	switch {
	case errors.Is(err, ErrNodeDied):
		r.noteDeath()
		return *r.res, nil
	case errors.Is(err, ErrUnresponsive):
		return *r.res, nil
	}
	return *r.res, err
}

func (r *run) cleanup() {
	r.logf("cleanup")
	defer r.logf("cleaned up")
	for _, c := range r.raws {
		c.Close()
	}
	for _, m := range r.rogues {
		stopRogue(m)
	}
	for _, p := range []*proc{r.victim, r.legit} {
		if p != nil {
			t0 := time.Now()
			killed := p.stop()
			r.logf("%s stopped in %v (killed: %v)", p.name, time.Since(t0), killed)
		}
	}
}

// noteHung records a node that stopped answering and keeps a dump of its
// goroutines, for finding what held it.
func (r *run) noteHung() {
	for _, p := range []*proc{r.victim, r.legit} {
		op := p.hung.Load()
		if op == nil {
			continue
		}
		if r.res.Unresponsive == "" {
			r.res.Unresponsive = fmt.Sprintf("the %s stopped answering its control channel (%s, %v)", p.name, *op, opTimeout)
		}
		if path := p.dump(os.TempDir(), r.c.Name); path != "" {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("goroutines of the %s: %s", p.name, path))
		}
	}
}

func (r *run) noteDeath() {
	if r.victim != nil && !r.victim.alive() {
		r.res.VictimDied = true
		r.res.DeathNote = r.victim.deathNote()
	}
}

// startStreams opens the case's legit streams and waits until each has
// delivered a few items.
func (r *run) startStreams(ctx context.Context) error {
	pace := r.o.PaceUS
	if r.c.Unpaced {
		pace = 0
	}
	if r.c.In {
		r.sets = append(r.sets, streamSet{name: "in", producer: r.legit, consumer: r.victim, paused: r.c.PauseConsumers})
	}
	if r.c.Out {
		r.sets = append(r.sets, streamSet{name: "out", producer: r.victim, consumer: r.legit, paused: r.c.PauseConsumers})
	}
	for _, s := range r.sets {
		var ca consumeAnswer
		if err := s.consumer.do(ctx, "consume", consumeArgs{Set: s.name, N: r.o.Streams}, &ca); err != nil {
			return err
		}
		var pa produceAnswer
		if err := s.producer.do(ctx, "produce", produceArgs{Set: s.name, Handles: ca.Handles, PaceUS: pace, Payload: r.o.Payload}, &pa); err != nil {
			return err
		}
		for _, t := range pa.Transports {
			if t != "messenger-mux-v2" {
				return fmt.Errorf("a legit stream negotiated %q, want the mux", t)
			}
		}
		r.res.LegitStreams += len(ca.Handles)
	}
	for _, s := range r.sets {
		if err := waitProgress(ctx, s.consumer, s.name, 3); err != nil {
			return err
		}
		if s.paused {
			if err := s.consumer.do(ctx, "pause", setArgs{Set: s.name}, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitProgress waits until every stream of set has delivered n items.
func waitProgress(ctx context.Context, p *proc, set string, n int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pa progressAnswer
		if err := p.do(ctx, "progress", setArgs{Set: set}, &pa); err != nil {
			return err
		}
		if pa.MinReceived >= n {
			return nil
		}
		if pa.Ended > 0 || time.Now().After(deadline) {
			return fmt.Errorf("legit streams %s did not get going: %+v", set, pa)
		}
		time.Sleep(5 * time.Millisecond) // polls a count in another process
	}
}

// measure runs the baseline, the attack and the windows after it.
func (r *run) measure(ctx context.Context) error {
	v, l := r.victim, r.legit
	var s0, s1, s2, s3, s4, s5 stats
	var l2, l3 stats
	if err := v.do(ctx, "stats", statsArgs{Start: true, GC: true}, &s0); err != nil {
		return err
	}
	time.Sleep(r.o.Baseline) // a measurement window
	if err := v.do(ctx, "stats", statsArgs{}, &s1); err != nil {
		return err
	}
	r.res.BaselineCores = cores(s0, s1)
	if err := l.do(ctx, "stats", statsArgs{Start: true, GC: true}, &l2); err != nil {
		return err
	}
	var sc stats // the counters before the attack, read on their own: the reply is large
	if err := v.do(ctx, "stats", statsArgs{Counters: true}, &sc); err != nil {
		return err
	}
	if err := v.do(ctx, "stats", statsArgs{Start: true, GC: true}, &s2); err != nil {
		return err
	}
	r.logf("baseline taken; attack")
	attackErr := r.c.Attack(ctx, r)
	ended := time.Now()
	if attackErr != nil && !errors.Is(attackErr, ErrNodeDied) {
		r.res.Notes = append(r.res.Notes, "attack: "+attackErr.Error())
	}
	t0 := time.Now()
	if err := v.do(ctx, "stats", statsArgs{GC: true}, &s3); err != nil {
		return err
	}
	r.res.ControlRTTMS = float64(time.Since(t0).Microseconds()) / 1e3
	if err := l.do(ctx, "stats", statsArgs{GC: true}, &l3); err != nil {
		return err
	}
	r.res.AttackNS = s3.WallNS - s2.WallNS
	legit := int64(r.res.BaselineCores * float64(r.res.AttackNS))
	r.res.AttackCPUNS = max(s3.CPUNS-s2.CPUNS-legit, 0)
	// The legit streams' CPU in the window is an estimate: allow it a
	// quarter off, and a millisecond for the measurements at its ends, so
	// that an attack of a few frames is not judged on noise.
	r.res.NoiseNS = legit/4 + int64(time.Millisecond)
	if r.res.Frames > 0 {
		r.res.CPUPerFrameUS = float64(r.res.AttackCPUNS) / 1e3 / float64(r.res.Frames)
	}
	r.heap(s2, s3, l2, l3)
	r.res.GoroutineDelta = s3.Goroutines - s2.Goroutines

	r.logf("attack over; ending the legit streams")
	if err := r.finishStreams(ctx); err != nil {
		return err
	}
	if wait := r.o.Settle - time.Since(ended); wait > 0 {
		time.Sleep(wait) // the "within 1 s": the window starts here
	}
	r.res.IdleStartNS = int64(time.Since(ended))
	if err := v.do(ctx, "stats", statsArgs{Start: true}, &s4); err != nil {
		return err
	}
	time.Sleep(r.o.IdleWindow) // a measurement window
	if err := v.do(ctx, "stats", statsArgs{}, &s5); err != nil {
		return err
	}
	r.res.IdleCores = cores(s4, s5)
	r.logf("idle window over")
	if r.c.Check != nil {
		r.logf("check")
		r.res.LegitProblems = append(r.res.LegitProblems, r.c.Check(ctx, r)...)
	}
	var s6 stats
	if err := v.do(ctx, "stats", statsArgs{Counters: true}, &s6); err != nil {
		return err
	}
	r.logf("counters read")
	r.res.Refusals, r.res.Symptoms = classify(sc.Counters, s6.Counters)
	return nil
}

func cores(a, b stats) float64 {
	if b.WallNS <= a.WallNS {
		return 0
	}
	return float64(b.CPUNS-a.CPUNS) / float64(b.WallNS-a.WallNS)
}

func (r *run) heap(s2, s3, l2, l3 stats) {
	vg, lg := int64(s3.HeapLive)-int64(s2.HeapLive), int64(l3.HeapLive)-int64(l2.HeapLive)
	r.res.HeapGrowth, r.res.HeapGrowthNode = vg, "victim"
	if lg > vg {
		r.res.HeapGrowth, r.res.HeapGrowthNode = lg, "legit peer"
	}
}

// finishStreams lets paused consumers read again, ends every legit stream
// and checks that each delivered every item it sent, in order, and ended
// cleanly.
func (r *run) finishStreams(ctx context.Context) error {
	for _, s := range r.sets {
		if s.paused {
			if err := s.consumer.do(ctx, "resume", setArgs{Set: s.name}, nil); err != nil {
				return err
			}
		}
	}
	for _, s := range r.sets {
		ok, probs, err := endSet(ctx, s, 3*time.Second)
		if err != nil {
			return err
		}
		r.res.LegitOK += ok
		r.res.LegitProblems = append(r.res.LegitProblems, probs...)
	}
	return nil
}

// endSet finishes one set: its producers finalize, then its consumers are
// given timeout to see every item and the end.
func endSet(ctx context.Context, s streamSet, timeout time.Duration) (ok int, problems []string, err error) {
	var sent []sentResult
	if err := s.producer.do(ctx, "finish", setArgs{Set: s.name, TimeoutMS: int(timeout / time.Millisecond)}, &sent); err != nil {
		return 0, nil, err
	}
	var recv []recvResult
	if err := s.consumer.do(ctx, "results", setArgs{Set: s.name, TimeoutMS: int(timeout / time.Millisecond)}, &recv); err != nil {
		return 0, nil, err
	}
	bySent := map[wire.AnchorHandle]sentResult{}
	for _, p := range sent {
		bySent[p.Handle] = p
	}
	for i, c := range recv {
		p, found := bySent[c.Handle]
		var why []string
		switch {
		case !found:
			why = append(why, "no producer")
		case p.Err != "":
			why = append(why, "producer: "+p.Err)
		}
		if !c.InOrder {
			why = append(why, "items out of order")
		}
		if found && p.Sent >= 0 && c.Received != p.Sent {
			why = append(why, fmt.Sprintf("%d of %d items arrived", c.Received, p.Sent))
		}
		if c.End != "eof" {
			why = append(why, "consumer: "+c.End)
		}
		if len(why) == 0 {
			ok++
			continue
		}
		problems = append(problems, fmt.Sprintf("stream %s/%d: %s", s.name, i, strings.Join(why, "; ")))
	}
	return ok, problems, nil
}

// refusalName picks the counters that say something was refused: their
// name or a label says so. The rest that moved are symptoms.
var refusalName = regexp.MustCompile(`(?i)(refus|reject|dropped|failure|unmatched|mismatch|overflow|protocol|malformed|forged|unprov|unknown|denied|stale|invalid|too_large|spoof|identity|untrusted|outcome="error")`)

// notRefusal are counters that match refusalName but count what an attack
// did to the victim, not what it refused.
var notRefusal = regexp.MustCompile(`(?i)(backpressure|epoch_death|EpochDeaths|watchdog|reposted|WatchdogFirings)`)

// classify returns the counters that moved between a and b, split into
// refusals and symptoms.
func classify(a, b map[string]float64) (refusals, symptoms map[string]float64) {
	refusals, symptoms = map[string]float64{}, map[string]float64{}
	for k, v := range b {
		d := v - a[k]
		if d <= 0 {
			continue
		}
		switch {
		case refusalName.MatchString(k) && !notRefusal.MatchString(k):
			refusals[k] = d
		case notRefusal.MatchString(k):
			symptoms[k] = d
		}
	}
	return refusals, symptoms
}

// SortedCounters lists m as "name +delta", largest first.
func SortedCounters(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s +%g", k, m[k])
	}
	return out
}
