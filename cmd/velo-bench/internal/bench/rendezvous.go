package bench

import (
	"cmp"

	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
)

const rendezvousHarness = "rendezvous"

// RendezvousConfig sizes the rendezvous harness.
type RendezvousConfig struct {
	Sizes []int    // payload bytes
	Bytes int      // bytes moved per size and rep (at least MinIters transfers)
	Reps  int      // repetitions
	Arms  []string // raw, get, unary
	// Path is the get arm's path: "chunked" (the default, plain TCP
	// nodes) or "rdma" (UCX beside TCP on both nodes, the owner staging
	// with RegisterDataPinned; needs a build with the ucx tag).
	Path string
}

// Rendezvous measures a payload moved by handle, in MiB/s and in process
// CPU per MiB, against a raw TCP transfer of the same bytes on loopback in
// the same run:
//
//   - get: the owner stages the payload once (RegisterData); each transfer
//     is Get (an acquire and 512 KiB pulls) and Detach. Only the Gets are
//     timed.
//   - unary: a unary call whose payload is staged transparently (above
//     256 KiB) and fetched by the receiver before its handler runs; the
//     time covers whatever the sender does to stage it.
//   - raw: one TCP connection; the client writes the bytes, the server
//     reads them all and answers one byte.
//
// cpu_us_per_mib is the process's user plus system CPU (getrusage, GC
// included) over exactly the timed section, divided by the MiB moved.
// Both nodes, and both ends of the raw connection, live in this process,
// so each arm's figure counts sender and receiver alike and the arms
// compare. Ratios get/raw and unary/raw of both metrics are per rep,
// paired by index.
func Rendezvous(cfg RendezvousConfig, r *Report) error {
	if cfg.Reps < 1 {
		cfg.Reps = 1
	}
	ctx := context.Background()
	areg := prometheus.NewRegistry() // the consumer's path decisions
	a, b, err := rvPair(ctx, cfg.Path, areg)
	if err != nil {
		return err
	}
	defer shutdownWithin(a, 5*time.Second)
	defer shutdownWithin(b, 5*time.Second)
	raw, err := newRawSink()
	if err != nil {
		return err
	}
	defer raw.close()
	for _, size := range cfg.Sizes {
		iters := max(3, cfg.Bytes/size)
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i)
		}
		params := map[string]any{"payload_bytes": size, "transfers": iters, "path": cmp.Or(cfg.Path, "chunked")}
		for rep := 0; rep < cfg.Reps; rep++ {
			for _, arm := range rotated(cfg.Arms, rep) {
				var d, cpu time.Duration
				switch arm {
				case "raw":
					d, cpu, err = raw.run(payload, iters)
				case "get":
					rdma := cfg.Path == "rdma"
					p0 := rvPaths(areg)["rdma"]
					d, cpu, err = rvGet(ctx, a, b, payload, iters, rdma)
					if n := rvPaths(areg)["rdma"] - p0; err == nil && rdma && n < iters {
						err = fmt.Errorf("%d of %d gets took the RDMA path", n, iters)
					}
				case "unary":
					d, cpu, err = rvUnary(ctx, a, b, payload, iters)
				default:
					return fmt.Errorf("unknown arm %q (want raw, get, unary)", arm)
				}
				if err != nil {
					return fmt.Errorf("%s, %d bytes: %w", arm, size, err)
				}
				mib := float64(size) * float64(iters) / (1 << 20)
				r.Add(rendezvousHarness, arm, "throughput_mib_per_s", "MiB/s", mib/d.Seconds(), params)
				r.Add(rendezvousHarness, arm, "cpu_us_per_mib", "us", float64(cpu.Nanoseconds())/1e3/mib, params)
			}
		}
		for _, m := range []struct{ metric, ratio string }{
			{"throughput_mib_per_s", "throughput_ratio"},
			{"cpu_us_per_mib", "cpu_us_per_mib_ratio"},
		} {
			base, ok := r.Find(rendezvousHarness, "raw", m.metric, params)
			if !ok {
				continue
			}
			for _, arm := range []string{"get", "unary"} {
				if f, ok := r.Find(rendezvousHarness, arm, m.metric, params); ok {
					r.Ratio(rendezvousHarness, arm+"/raw", m.ratio, f, base, params)
				}
			}
		}
	}
	return nil
}

// rvPair starts the consumer a and the owner b; a serves "sink". With
// path "rdma" both have UCX beside TCP and an RDMA registry.
func rvPair(ctx context.Context, path string, areg *prometheus.Registry) (a, b *velo.Node, err error) {
	first := true
	start := func() (*velo.Node, error) {
		reg := (*prometheus.Registry)(nil)
		if first {
			reg, first = areg, false
		}
		switch path {
		case "", "chunked":
		case "rdma":
			return rvNode(ctx, reg, 1, false)
		default:
			return nil, fmt.Errorf("unknown path %q (want chunked or rdma)", path)
		}
		tr, err := NewTransport("tcp")
		if err != nil {
			return nil, err
		}
		return velo.New(ctx, velo.WithTransport(tr))
	}
	if a, err = start(); err != nil {
		return nil, nil, err
	}
	if b, err = start(); err != nil {
		shutdownWithin(a, 5*time.Second)
		return nil, nil, err
	}
	err = a.Register(velo.UnaryHandler("sink", func(c *velo.Context) ([]byte, error) {
		return []byte{byte(len(c.Payload))}, nil
	}))
	if err == nil {
		err = b.RegisterPeer(a.PeerInfo())
	}
	if err == nil {
		err = a.RegisterPeer(b.PeerInfo())
	}
	if err == nil {
		err = msgrx.Handshake(b.Messenger(), ctx, a.InstanceID())
	}
	if err == nil {
		err = msgrx.Handshake(a.Messenger(), ctx, b.InstanceID())
	}
	if err != nil {
		shutdownWithin(a, 5*time.Second)
		shutdownWithin(b, 5*time.Second)
		return nil, nil, err
	}
	return a, b, nil
}

// rvGet: a pulls a payload that b staged, iters times. It returns the
// wall time and the process CPU time of the Gets alone.
func rvGet(ctx context.Context, a, b *velo.Node, payload []byte, iters int, pinned bool) (wall, cpu time.Duration, err error) {
	stage := b.Rendezvous.RegisterData
	if pinned {
		stage = b.Rendezvous.RegisterDataPinned
	}
	h := stage(payload)
	for i := 0; i < iters; i++ {
		cpu0, t0 := processCPU(), time.Now()
		got, lease, err := a.Rendezvous.Get(ctx, h)
		if err != nil {
			return 0, 0, err
		}
		wall += time.Since(t0)
		cpu += processCPU() - cpu0
		if len(got) != len(payload) {
			return 0, 0, fmt.Errorf("got %d bytes", len(got))
		}
		if err := a.Rendezvous.Detach(ctx, h, lease); err != nil {
			return 0, 0, err
		}
	}
	if _, err := a.Rendezvous.Metadata(ctx, h); err != nil {
		return 0, 0, err
	}
	_, lease, err := a.Rendezvous.Get(ctx, h)
	if err == nil {
		err = a.Rendezvous.Release(ctx, h, lease)
	}
	return wall, cpu, err
}

// rvUnary: b calls a's "sink" with the payload, iters times.
func rvUnary(ctx context.Context, a, b *velo.Node, payload []byte, iters int) (wall, cpu time.Duration, err error) {
	cpu0, t0 := processCPU(), time.Now()
	for i := 0; i < iters; i++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := b.Unary(cctx, a.InstanceID(), "sink", payload)
		cancel()
		if err != nil {
			return 0, 0, err
		}
	}
	return time.Since(t0), processCPU() - cpu0, nil
}

// rawSink is a loopback TCP server that reads a whole transfer and
// answers one byte.
type rawSink struct {
	ln   net.Listener
	conn net.Conn
	done chan struct{}
}

func newRawSink() (*rawSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &rawSink{ln: ln, done: make(chan struct{})}
	go s.serve()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.conn = c
	return s, nil
}

func (s *rawSink) serve() {
	defer close(s.done)
	c, err := s.ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	var hdr [8]byte
	buf := make([]byte, 1<<20)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int64(hdr[0]) | int64(hdr[1])<<8 | int64(hdr[2])<<16 | int64(hdr[3])<<24
		for n > 0 {
			k, err := c.Read(buf[:min(int64(len(buf)), n)])
			if err != nil {
				return
			}
			n -= int64(k)
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return
		}
	}
}

// run sends payload iters times, each answered before the next, and
// returns the wall and process CPU time (both ends are in this process).
func (s *rawSink) run(payload []byte, iters int) (wall, cpu time.Duration, err error) {
	n := len(payload)
	hdr := []byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24), 0, 0, 0, 0}
	var ack [1]byte
	cpu0, t0 := processCPU(), time.Now()
	for i := 0; i < iters; i++ {
		if _, err := s.conn.Write(hdr); err != nil {
			return 0, 0, err
		}
		if _, err := s.conn.Write(payload); err != nil {
			return 0, 0, err
		}
		if _, err := io.ReadFull(s.conn, ack[:]); err != nil {
			return 0, 0, err
		}
	}
	return time.Since(t0), processCPU() - cpu0, nil
}

func (s *rawSink) close() {
	s.conn.Close()
	s.ln.Close()
	<-s.done
}
