package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// The parent of a --procs run: for each arm of each rep it starts the
// frontend and engine children (this binary again, responseplane_child.go;
// one per node, or FrontendProcs and EngineProcs of them holding an equal
// share each), passes the hellos between the sides, opens the window on
// the engines and then the frontends (a closed loop's on the wall clock,
// which it sets), closes it once every frontend has read all its
// responses, and adds up what the children measured. Any child's error, an early exit or the run's
// timeout kills them all; none outlives the run (and on Linux none
// outlives the parent: Pdeathsig).

// rpProc is one running child.
type rpProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	msgs  chan rpMsg
	// exited is closed once the child has exited and its stdout is read.
	exited  chan struct{}
	exitErr error
	// leaving is set once the parent told it to exit (or kills it): its
	// exit is no failure then.
	leaving atomic.Bool
}

// rpProcs are the children of one arm's rep.
type rpProcs struct {
	cfg  ResponsePlaneConfig
	arm  string
	fail context.CancelCauseFunc
	// died is closed when the first child exits early (diedOnce).
	died     chan struct{}
	diedOnce sync.Once
	fronts   []*rpProc
	engines  []*rpProc
}

func (ps *rpProcs) all() []*rpProc {
	return append(append([]*rpProc(nil), ps.engines...), ps.fronts...)
}

// childCommand is the command of one child.
func (cfg ResponsePlaneConfig) childCommand(role string, index int, arm string) (*exec.Cmd, error) {
	args := []string{"--rp-role", role, "--rp-index", strconv.Itoa(index), "--rp-arm", arm}
	if cfg.spawn != nil {
		return cfg.spawn(args), nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, append([]string{responsePlaneHarness}, args...)...), nil
}

// start starts one child and sends it the config.
func (ps *rpProcs) start(role string, index int) (*rpProc, error) {
	cmd, err := ps.cfg.childCommand(role, index, ps.arm)
	if err != nil {
		return nil, err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// Under -race a child would sleep a second at exit (atexit_sleep_ms).
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = rpSysProcAttr()
	p := &rpProc{name: fmt.Sprintf("%s %d", role, index), cmd: cmd, msgs: make(chan rpMsg, 16), exited: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	go p.read(stdout, ps)
	cfg := ps.cfg
	cfg.Samples = nil
	return p, p.send(rpMsg{Op: "config", Config: &cfg})
}

// childDeathGrace is how long a child's error waits before it fails the
// run: a child that crashes breaks its peers' connections, and their
// errors (a broken pipe) can reach the parent before the crash does. The
// crash is the cause to report.
const childDeathGrace = 250 * time.Millisecond

// failSoon fails the run with err unless a child exits early within
// childDeathGrace; that exit is then the run's cause.
func (ps *rpProcs) failSoon(err error) {
	go func() {
		t := time.NewTimer(childDeathGrace)
		defer t.Stop()
		select {
		case <-ps.died:
		case <-t.C:
		}
		ps.fail(err)
	}()
}

// read hands the child's lines to p.msgs until it exits. An error line,
// or an exit before the parent asked for one, fails the run.
func (p *rpProc) read(stdout io.Reader, ps *rpProcs) {
	fail := ps.fail
	reported := false // the child told what went wrong before it exits
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var m rpMsg
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Op == "" {
			continue // not a protocol line
		}
		if m.Op == "error" {
			reported = true
			ps.failSoon(fmt.Errorf("%s: %s", p.name, m.Err))
			continue
		}
		select {
		case p.msgs <- m:
		default:
			fail(fmt.Errorf("%s: too many messages", p.name))
		}
	}
	p.exitErr = p.cmd.Wait()
	close(p.exited)
	// A child that said what went wrong exits right after: its failSoon
	// already fails the run, unless another child's death, often the
	// cause of its error (a frontend's write to a crashed engine), is
	// seen within the grace. Counting its own exit as that death would
	// name the wrong child, depending on which exit the parent saw first.
	if !p.leaving.Load() && !reported {
		fail(fmt.Errorf("%s exited early: %v", p.name, p.exitErr))
		ps.diedOnce.Do(func() { close(ps.died) })
	}
}

func (p *rpProc) send(m rpMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

func (p *rpProc) recv(ctx context.Context, op string) (rpMsg, error) {
	select {
	case m := <-p.msgs:
		if m.Op != op {
			return m, fmt.Errorf("%s said %q, want %q", p.name, m.Op, op)
		}
		return m, nil
	case <-ctx.Done():
		return rpMsg{}, context.Cause(ctx)
	}
}

// each sends m (when its Op is set) to every child of ps, then waits for
// each to answer op.
func each(ctx context.Context, ps []*rpProc, m rpMsg, op string) ([]rpMsg, error) {
	if m.Op != "" {
		for _, p := range ps {
			if err := p.send(m); err != nil {
				return nil, err
			}
		}
	}
	out := make([]rpMsg, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = p.recv(ctx, op); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stop ends every child: after a good run it asks them to exit and gives
// them a while; any child still running then, or every child after a
// failed run, is killed. It returns once all of them are gone.
func (ps *rpProcs) stop(graceful bool) {
	procs := ps.all()
	for _, p := range procs {
		p.leaving.Store(true)
		if graceful {
			p.send(rpMsg{Op: "exit"})
		}
		p.stdin.Close()
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	if !graceful {
		deadline.Reset(0)
	}
	for _, p := range procs {
		select {
		case <-p.exited:
			continue
		case <-deadline.C:
			deadline.Reset(0) // the rest are killed without waiting
		}
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// responsePlaneProcsRun is one arm of one rep with every frontend and
// every engine a child process.
func responsePlaneProcsRun(cfg ResponsePlaneConfig, arm string, params map[string]any, r *Report) (err error) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("run timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	ps := &rpProcs{cfg: cfg, arm: arm, fail: fail, died: make(chan struct{})}
	defer func() {
		ps.stop(err == nil)
		if err == nil {
			// A child that failed on its way out still fails the run.
			err = context.Cause(ctx)
		}
	}()
	for e := range cfg.engineProcs() {
		p, err := ps.start("engine", e)
		if p != nil {
			ps.engines = append(ps.engines, p)
		}
		if err != nil {
			return err
		}
	}
	for h := range cfg.frontendProcs() {
		p, err := ps.start("frontend", h)
		if p != nil {
			ps.fronts = append(ps.fronts, p)
		}
		if err != nil {
			return err
		}
	}

	// The hellos, then each side gets the other's.
	engineHellos, err := hellos(ctx, ps.engines, cfg.Engines)
	if err != nil {
		return err
	}
	frontHellos, err := hellos(ctx, ps.fronts, cfg.AnchorHosts)
	if err != nil {
		return err
	}
	for _, p := range ps.engines {
		if err := p.send(rpMsg{Op: "peers", Peers: frontHellos}); err != nil {
			return err
		}
	}
	for _, p := range ps.fronts {
		if err := p.send(rpMsg{Op: "peers", Peers: engineHellos}); err != nil {
			return err
		}
	}
	if _, err := each(ctx, ps.all(), rpMsg{}, "ready"); err != nil {
		return err
	}

	// The window: engines first, so that they wait on their queues when
	// the first request comes, as in-process. A closed loop's window is
	// set here on the wall clock, from now: the warm-up covers the
	// children's starts.
	start := rpMsg{Op: "start"}
	if cfg.Concurrency > 0 {
		warm := rpWallClock() + int64(cfg.Warmup)
		start.Window = []int64{warm, warm + int64(cfg.Duration)}
	}
	if _, err := each(ctx, ps.engines, start, "started"); err != nil {
		return err
	}
	if _, err := each(ctx, ps.fronts, start, "started"); err != nil {
		return err
	}
	if _, err := each(ctx, ps.fronts, rpMsg{}, "finished"); err != nil {
		return err
	}
	engineReps, err := each(ctx, ps.engines, rpMsg{Op: "stop"}, "report")
	if err != nil {
		return err
	}
	frontReps, err := each(ctx, ps.fronts, rpMsg{Op: "stop"}, "report")
	if err != nil {
		return err
	}
	if cfg.Concurrency > 0 {
		return procsClosedResult(r, cfg, arm, params, frontReps, engineReps)
	}
	res, err := procsResult(cfg, arm, frontReps, engineReps)
	if err != nil {
		return err
	}
	addRPResult(r, cfg, arm, params, res)
	return nil
}

// hellos gathers the children's hellos, their nodes' in order of the
// children: want of them.
func hellos(ctx context.Context, ps []*rpProc, want int) ([]rpHello, error) {
	ms, err := each(ctx, ps, rpMsg{}, "hello")
	if err != nil {
		return nil, err
	}
	var out []rpHello
	for i, m := range ms {
		if len(m.Hellos) != want/len(ps) {
			return nil, fmt.Errorf("%s: %d hellos, want %d", ps[i].name, len(m.Hellos), want/len(ps))
		}
		out = append(out, m.Hellos...)
	}
	return out, nil
}

// procsResult adds up the children's reports and checks them: every
// request served and read whole, and the attaches the arm must make.
func procsResult(cfg ResponsePlaneConfig, arm string, fronts, engines []rpMsg) (rpResult, error) {
	n, T := cfg.Requests, cfg.Tokens
	res := rpResult{procs: true, ttft: make([]int64, n), tokLat: make([]int64, n*T)}
	var t0, t1 int64
	var read, served int
	var attaches uint64
	per := cfg.AnchorHosts / len(fronts)
	for p, m := range fronts {
		rep := m.Report
		if rep == nil {
			return res, fmt.Errorf("frontend %d: a report without its report", p)
		}
		if p == 0 || rep.T0 < t0 {
			t0 = rep.T0
		}
		t1 = max(t1, rep.T1)
		read += rep.Requests
		res.frontCPU += time.Duration(rep.CPUNS)
		res.writes += rep.Writes
		res.wakes = res.wakes.add(rep.Wakes)
		// Its requests are those of its frontends p*per .. p*per+per-1,
		// in index order.
		k := 0
		for i := range n {
			if h := i % cfg.AnchorHosts; h < p*per || h >= (p+1)*per {
				continue
			}
			if k >= len(rep.TTFT) || (k+1)*T > len(rep.TokLat) {
				return res, fmt.Errorf("frontend %d: latencies of %d requests, want more", p, len(rep.TTFT))
			}
			res.ttft[i] = rep.TTFT[k]
			copy(res.tokLat[i*T:(i+1)*T], rep.TokLat[k*T:(k+1)*T])
			k++
		}
	}
	for e, m := range engines {
		rep := m.Report
		if rep == nil {
			return res, fmt.Errorf("engine %d: a report without its report", e)
		}
		served += rep.Requests
		attaches += rep.Attaches
		res.engineCPU += time.Duration(rep.CPUNS)
		res.writes += rep.Writes
		res.engineSys = res.engineSys.add(rep.Sys)
		res.wakes = res.wakes.add(rep.Wakes)
	}
	if read != n || served != n {
		return res, fmt.Errorf("the frontends read %d responses whole and the engines served %d requests, want %d", read, served, n)
	}
	if a, ok := veloArmOf(cfg, arm); ok {
		res.counting, res.muxed = true, a.wantKey != wire.TCPStreamKey
		// The mux arms' engines tap their attaches.
		if err := checkAttaches(res.muxed, a.zeroRTT, attaches, n); err != nil {
			return res, err
		}
	}
	res.wall = time.Duration(t1 - t0)
	if res.wall <= 0 {
		return res, fmt.Errorf("a window of %v", res.wall)
	}
	res.cpu = res.frontCPU + res.engineCPU
	return res, nil
}

// procsClosedResult adds up the children's reports of a closed loop and
// adds its figures.
func procsClosedResult(r *Report, cfg ResponsePlaneConfig, arm string, params map[string]any, fronts, engines []rpMsg) error {
	var sum rpLoadSummary
	var frontCPU, engineCPU time.Duration
	for p, m := range fronts {
		if m.Report == nil || m.Report.Load == nil {
			return fmt.Errorf("frontend %d: a report without its closed loop", p)
		}
		sum = sum.add(*m.Report.Load)
		frontCPU += time.Duration(m.Report.CPUNS)
	}
	var served int
	var attaches uint64
	for p, m := range engines {
		if m.Report == nil {
			return fmt.Errorf("engine %d: a report without its report", p)
		}
		served += m.Report.Requests
		attaches += m.Report.Attaches
		engineCPU += time.Duration(m.Report.CPUNS)
	}
	// A failed request may have reached its engine or not; one read whole
	// was served.
	if served < sum.Completed {
		return fmt.Errorf("the engines served %d requests, the frontends read %d whole", served, sum.Completed)
	}
	if a, ok := veloArmOf(cfg, arm); ok {
		if err := checkAttaches(a.wantKey != wire.TCPStreamKey, a.zeroRTT, attaches, sum.Completed); err != nil {
			return err
		}
	}
	return addRPClosedResult(r, cfg, arm, params, sum, frontCPU, engineCPU, true)
}
