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
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
)

// The two-process rendezvous harness (--procs): an owner and a consumer,
// each its own child process (this binary again, with RendezvousChildFlag),
// over a TCP control plane with UCX beside it, as a deployment runs them.
// Per arm the parent starts one pair and keeps it for every rep:
//
//   - rdma: the owner stages with RegisterDataPinned and answers each
//     acquire with a descriptor; the consumer GETs.
//   - rdma-shm: rdma with arenas UCX allocates (ucx.WithAllocatedArenas):
//     over shared memory the GET then reads the owner's segment with no
//     work on the owner's side, at the cost of attaching it per GET.
//   - chunked: the same binary, configuration and pinned staging, with the
//     owner's rdma_min_bytes above the payload, so it answers below_min
//     and the consumer pulls 512 KiB chunks. Only the path differs.
//   - perftest: UCX's own ucx_perftest, ucp_get of the same size, server
//     and client processes under the same UCX_TLS: the floor.
//
// Each rep the consumer moves the payload iters times (GetInto a buffer it
// reuses, then Detach), after one untimed warm-up that pays the endpoint
// wireup. Each child reports its own CPU (getrusage) over exactly the timed
// window, so the owner's CPU per MiB is the owner's alone.

// RendezvousChildFlag is the hidden flag that makes velo-bench a child of
// a --procs rendezvous run; its value is the role.
const RendezvousChildFlag = "rv-child"

// rvChildEnv also names the role of a child, for a test binary, which
// takes no harness arguments (TestMain reads it).
const rvChildEnv = "VELO_BENCH_RV_CHILD"

// rvMsg is one line of the protocol between the parent and a child.
type rvMsg struct {
	Op     string          `json:"op"`
	Peer   json.RawMessage `json:"peer,omitempty"`
	Handle string          `json:"handle,omitempty"`
	Size   int             `json:"size,omitempty"`
	Iters  int             `json:"iters,omitempty"`
	MinB   int             `json:"min_bytes,omitempty"`
	CPUNS  int64           `json:"cpu_ns,omitempty"`
	WallNS int64           `json:"wall_ns,omitempty"`
	Pinned bool            `json:"pinned,omitempty"`
	Paths  map[string]int  `json:"paths,omitempty"`
	Err    string          `json:"err,omitempty"`
	Alloc  bool            `json:"alloc,omitempty"`
}

// rvProc is one running child.
type rvProc struct {
	name string
	cmd  *exec.Cmd
	in   *json.Encoder
	inW  io.Closer
	out  chan rvMsg
}

func startRVChild(ctx context.Context, role string, env []string) (*rvProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "rendezvous", "--"+RendezvousChildFlag, role)
	cmd.Env = append(append(os.Environ(), rvChildEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = rpSysProcAttr()
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &rvProc{name: role, cmd: cmd, in: json.NewEncoder(w), inW: w, out: make(chan rvMsg, 4)}
	go func() {
		defer close(p.out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var m rvMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.out <- m
			}
		}
	}()
	return p, nil
}

// ask sends m and waits for the child's answer.
func (p *rvProc) ask(ctx context.Context, m rvMsg) (rvMsg, error) {
	if err := p.in.Encode(m); err != nil {
		return rvMsg{}, fmt.Errorf("%s: %w", p.name, err)
	}
	select {
	case a, ok := <-p.out:
		switch {
		case !ok:
			return rvMsg{}, fmt.Errorf("%s exited: %v", p.name, p.cmd.Wait())
		case a.Err != "":
			return rvMsg{}, fmt.Errorf("%s: %s", p.name, a.Err)
		}
		return a, nil
	case <-ctx.Done():
		return rvMsg{}, fmt.Errorf("%s: %w", p.name, context.Cause(ctx))
	}
}

func (p *rvProc) stop() {
	p.in.Encode(rvMsg{Op: "exit"})
	p.inW.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// rvPairProcs is one arm's owner and consumer.
type rvPairProcs struct{ owner, consumer *rvProc }

// startRVPair starts the pair of an arm and introduces them to each other;
// minBytes is the owner's rdma_min_bytes.
func startRVPair(ctx context.Context, minBytes int, alloc bool) (*rvPairProcs, error) {
	owner, err := startRVChild(ctx, "owner", nil)
	if err != nil {
		return nil, err
	}
	consumer, err := startRVChild(ctx, "consumer", nil)
	if err != nil {
		owner.stop()
		return nil, err
	}
	pp := &rvPairProcs{owner, consumer}
	o, err := owner.ask(ctx, rvMsg{Op: "start", MinB: minBytes, Alloc: alloc})
	if err == nil {
		var c rvMsg
		if c, err = consumer.ask(ctx, rvMsg{Op: "start", MinB: minBytes, Alloc: alloc}); err == nil {
			if _, err = owner.ask(ctx, rvMsg{Op: "peer", Peer: c.Peer}); err == nil {
				_, err = consumer.ask(ctx, rvMsg{Op: "peer", Peer: o.Peer})
			}
		}
	}
	if err != nil {
		pp.stop()
		return nil, err
	}
	return pp, nil
}

func (pp *rvPairProcs) stop() {
	pp.consumer.stop()
	pp.owner.stop()
}

// rvRepResult is what one rep of an arm measured.
type rvRepResult struct {
	wall, ownerCPU, consumerCPU time.Duration
	paths                       map[string]int // the consumer's path decisions in the window
	pinned                      bool
}

// run stages size bytes on the owner and has the consumer move them iters
// times (after one warm-up).
func (pp *rvPairProcs) run(ctx context.Context, size, iters int) (rvRepResult, error) {
	st, err := pp.owner.ask(ctx, rvMsg{Op: "stage", Size: size})
	if err != nil {
		return rvRepResult{}, err
	}
	if _, err := pp.consumer.ask(ctx, rvMsg{Op: "get", Handle: st.Handle, Size: size, Iters: 1}); err != nil {
		return rvRepResult{}, fmt.Errorf("warm-up: %w", err)
	}
	o0, err := pp.owner.ask(ctx, rvMsg{Op: "cpu"})
	if err != nil {
		return rvRepResult{}, err
	}
	g, err := pp.consumer.ask(ctx, rvMsg{Op: "get", Handle: st.Handle, Size: size, Iters: iters})
	if err != nil {
		return rvRepResult{}, err
	}
	o1, err := pp.owner.ask(ctx, rvMsg{Op: "cpu"})
	if err != nil {
		return rvRepResult{}, err
	}
	if _, err := pp.owner.ask(ctx, rvMsg{Op: "drop", Handle: st.Handle}); err != nil {
		return rvRepResult{}, err
	}
	return rvRepResult{
		wall: time.Duration(g.WallNS), consumerCPU: time.Duration(g.CPUNS),
		ownerCPU: time.Duration(o1.CPUNS - o0.CPUNS), paths: g.Paths, pinned: st.Pinned,
	}, nil
}

// rvPerftest runs ucx_perftest's ucp_get of size bytes iters times between
// a server and a client process on loopback and returns its overall
// bandwidth in MiB/s.
func rvPerftest(ctx context.Context, size, iters int) (float64, error) {
	bin, err := exec.LookPath("ucx_perftest")
	if err != nil {
		return 0, fmt.Errorf("ucx_perftest (Debian's ucx-utils) is not installed: %w", err)
	}
	port := fmt.Sprint(20000 + os.Getpid()%20000)
	args := []string{"-t", "ucp_get", "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters), "-p", port}
	srv := exec.CommandContext(ctx, bin, args...)
	srv.SysProcAttr = rpSysProcAttr()
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out []byte
	for try := 0; ; try++ { // the client fails until the server listens
		cl := exec.CommandContext(ctx, bin, append([]string{"127.0.0.1"}, args...)...)
		cl.SysProcAttr = rpSysProcAttr()
		out, err = cl.CombinedOutput()
		if err == nil || try == 50 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, fmt.Errorf("ucx_perftest client: %w: %s", err, out)
	}
	return parsePerftest(string(out))
}

// parsePerftest reads the overall bandwidth (MB/s, which ucx_perftest
// means as MiB/s) from its Final line: iterations, three latencies, then
// average and overall bandwidth.
func parsePerftest(out string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] == "Final:" {
			var bw float64
			if _, err := fmt.Sscan(f[6], &bw); err != nil {
				return 0, fmt.Errorf("ucx_perftest Final line %q: %w", line, err)
			}
			return bw, nil
		}
	}
	return 0, errors.New("ucx_perftest printed no Final line")
}

// RendezvousProcsConfig sizes a --procs run.
type RendezvousProcsConfig struct {
	Sizes []int
	Bytes int      // bytes moved per size, arm and rep (at least 3 transfers)
	Reps  int      // repetitions
	Arms  []string // rdma, chunked, perftest
}

// RendezvousProcs runs the two-process harness.
func RendezvousProcs(cfg RendezvousProcsConfig, r *Report) error {
	if cfg.Reps < 1 {
		cfg.Reps = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	pairs := map[string]*rvPairProcs{}
	defer func() {
		for _, pp := range pairs {
			pp.stop()
		}
	}()
	maxSize := slices.Max(cfg.Sizes)
	for _, arm := range cfg.Arms {
		var min int
		alloc := false
		switch arm {
		case "rdma":
			min = 1
		case "rdma-shm":
			min, alloc = 1, true
		case "chunked":
			min = maxSize + 1
		case "perftest":
			continue
		default:
			return fmt.Errorf("unknown arm %q (want rdma, rdma-shm, chunked, perftest)", arm)
		}
		pp, err := startRVPair(ctx, min, alloc)
		if err != nil {
			return fmt.Errorf("%s pair: %w", arm, err)
		}
		pairs[arm] = pp
	}
	for _, size := range cfg.Sizes {
		iters := max(3, cfg.Bytes/size)
		params := map[string]any{"payload_bytes": size, "transfers": iters, "procs": true, "ucx_tls": os.Getenv("UCX_TLS")}
		mib := float64(size) * float64(iters) / (1 << 20)
		for rep := 0; rep < cfg.Reps; rep++ {
			for _, arm := range rotated(cfg.Arms, rep) {
				if arm == "perftest" {
					bw, err := rvPerftest(ctx, size, iters)
					if err != nil {
						return err
					}
					r.Add(rendezvousHarness, arm, "throughput_mib_per_s", "MiB/s", bw, params)
					continue
				}
				res, err := pairs[arm].run(ctx, size, iters)
				if err != nil {
					return fmt.Errorf("%s, %d bytes: %w", arm, size, err)
				}
				// The consumer counts ok for each GET that completed; a
				// transfer the owner answered chunked (below_min) counts
				// nothing on the consumer's side.
				want := 0
				if arm == "rdma" || arm == "rdma-shm" {
					want = iters
				}
				if got := res.paths["rdma"]; got != want {
					return fmt.Errorf("%s, %d bytes: %d of %d transfers took the RDMA path, want %d (consumer's decisions: %v)", arm, size, got, iters, want, res.paths)
				}
				r.Add(rendezvousHarness, arm, "throughput_mib_per_s", "MiB/s", mib/res.wall.Seconds(), params)
				r.Add(rendezvousHarness, arm, "owner_cpu_us_per_mib", "us", float64(res.ownerCPU.Nanoseconds())/1e3/mib, params)
				r.Add(rendezvousHarness, arm, "consumer_cpu_us_per_mib", "us", float64(res.consumerCPU.Nanoseconds())/1e3/mib, params)
			}
		}
		rvProcsRatios(r, params)
	}
	return nil
}

func rvProcsRatios(r *Report, params map[string]any) {
	ratio := func(num, den, metric, name string) {
		a, ok1 := r.Find(rendezvousHarness, num, metric, params)
		b, ok2 := r.Find(rendezvousHarness, den, metric, params)
		if ok1 && ok2 {
			r.Ratio(rendezvousHarness, num+"/"+den, name, a, b, params)
		}
	}
	for _, arm := range []string{"rdma", "rdma-shm"} {
		ratio(arm, "chunked", "throughput_mib_per_s", "throughput_ratio")
		ratio(arm, "perftest", "throughput_mib_per_s", "throughput_ratio")
		ratio(arm, "chunked", "owner_cpu_us_per_mib", "owner_cpu_us_per_mib_ratio")
	}
}

// RendezvousChild serves as one child of a --procs run.
func RendezvousChild(role string, in io.Reader, out io.Writer) error {
	if role != "owner" && role != "consumer" {
		return fmt.Errorf("unknown rendezvous child role %q", role)
	}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var c *rvChild
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	for sc.Scan() {
		var m rvMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return err
		}
		if m.Op == "exit" {
			return nil
		}
		var a rvMsg
		var err error
		if m.Op == "start" {
			c, err = newRVChild(m.MinB, m.Alloc)
			if err == nil {
				a.Peer, err = json.Marshal(c.node.PeerInfo())
			}
		} else if c == nil {
			err = errors.New("no start")
		} else {
			a, err = c.serve(m)
		}
		if err != nil {
			a = rvMsg{Err: err.Error()}
		}
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return sc.Err()
}

// peerFrom decodes a PeerInfo the parent passed on.
func peerFrom(b json.RawMessage) (ext.PeerInfo, error) {
	var p ext.PeerInfo
	err := json.Unmarshal(b, &p)
	return p, err
}
