package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// TxBudgetConfig sets the tx-budget harness.
type TxBudgetConfig struct {
	Transports []string // "tcp", "uds"
	Iters      int      // round trips per rung and rep
	Reps       int
	HeaderLen  int
	PayloadLen int
}

// TxBudget attributes the one-way latency of a small frame to layers, one
// rung at a time, over a depth-1 ping-pong (one-way = round trip / 2):
//
//	L0 blocking socket calls on locked OS threads
//	L1 goroutines and the netpoller (net.Conn)
//	L2 L1 plus the frame codec
//	L3 the full transport: Send, admission gate, writer (inline when idle),
//	   frame reader, adapter admission, and the consumer as the adapter's
//	   sink on the reader goroutine
//	L3q L3 with the consumer as a goroutine that pops the adapter's queue:
//	   one more goroutine wake per direction, shown for comparison
//
// Each rep runs the rungs in a rotated order (see rotated). The ratios are
// L3/L0, L3/L1 and the headline, L3 over the faster of L0 and L1 in each
// rep (TxBudgetHeadline).
func TxBudget(cfg TxBudgetConfig, r *Report) error {
	rungs := []struct {
		name string
		run  func(kind string, cfg TxBudgetConfig) ([]time.Duration, error)
	}{{"L0", rungL0}, {"L1", rungL1}, {"L2", rungL2}, {"L3", rungL3}, {"L3q", rungL3q}}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, kind := range cfg.Transports {
			params := map[string]any{"transport": kind, "header_bytes": cfg.HeaderLen, "payload_bytes": cfg.PayloadLen, "iters": cfg.Iters}
			for _, rung := range rotated(rungs, rep) {
				rtts, err := rung.run(kind, cfg)
				if err != nil {
					return fmt.Errorf("%s %s: %w", kind, rung.name, err)
				}
				p50, p99 := oneWay(rtts)
				r.Add("tx-budget", rung.name, "one_way_p50_ns", "ns", p50, params)
				r.Add("tx-budget", rung.name, "one_way_p99_ns", "ns", p99, params)
			}
		}
	}
	for _, kind := range cfg.Transports {
		params := map[string]any{"transport": kind, "header_bytes": cfg.HeaderLen, "payload_bytes": cfg.PayloadLen, "iters": cfg.Iters}
		l3, _ := r.Find("tx-budget", "L3", "one_way_p50_ns", params)
		l0, _ := r.Find("tx-budget", "L0", "one_way_p50_ns", params)
		l1, _ := r.Find("tx-budget", "L1", "one_way_p50_ns", params)
		r.Ratio("tx-budget", "L3/L0", "one_way_p50_ratio", l3, l0, params)
		r.Ratio("tx-budget", "L3/L1", "one_way_p50_ratio", l3, l1, params)
		r.Ratio("tx-budget", TxBudgetHeadline, "one_way_p50_ratio", l3, fasterPerRep(l0, l1), params)
	}
	return nil
}

// TxBudgetHeadline is the arm of tx-budget's headline ratio: the whole
// transport against the faster of the two plain-socket rungs, rep by rep.
// Neither rung is always the floor: on a VM where a wake across OS threads
// is dear, blocking threads (L0) are slower than the netpoller (L1), and
// L3/L0 alone would flatter the transport.
const TxBudgetHeadline = "L3/min(L0,L1)"

// fasterPerRep is a figure whose sample i is the smaller of a's and b's
// sample i: the faster arm of each rep.
func fasterPerRep(a, b Figure) Figure {
	n := min(len(a.Samples), len(b.Samples))
	out := a
	out.Samples = make([]float64, n)
	for i := range out.Samples {
		out.Samples[i] = min(a.Samples[i], b.Samples[i])
	}
	return out
}

// oneWay turns round trips into one-way p50 and p99 in nanoseconds.
func oneWay(rtts []time.Duration) (p50, p99 float64) {
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	at := func(q float64) float64 { return float64(rtts[int(q*float64(len(rtts)-1))]) / 2 }
	return at(0.5), at(0.99)
}

const warmup = 1000

// listen opens a listener of the kind: loopback TCP, or a Unix socket in a
// fresh directory that cleanup removes (after the listener is closed).
func listen(kind string) (ln net.Listener, cleanup func(), err error) {
	switch kind {
	case "tcp", "tls": // a TLS pair handshakes on top (socketPair, grpcServe)
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return ln, func() {}, err
	case "uds":
		dir, err := os.MkdirTemp("", "velo-bench-")
		if err != nil {
			return nil, nil, err
		}
		if ln, err = net.Listen("unix", filepath.Join(dir, "s")); err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		return ln, func() { os.RemoveAll(dir) }, nil
	}
	return nil, nil, fmt.Errorf("unknown transport %q", kind)
}

// socketPair returns a connected client and server socket of the kind.
func socketPair(kind string) (client, server net.Conn, cleanup func(), err error) {
	ln, removeDir, err := listen(kind)
	if err != nil {
		return nil, nil, nil, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		ln.Close()
		<-accepted
		removeDir()
		return nil, nil, nil, err
	}
	server = <-accepted
	if server == nil {
		client.Close()
		removeDir()
		return nil, nil, nil, fmt.Errorf("accept failed")
	}
	if kind == "tls" {
		if client, server, err = tlsPair(client, server); err != nil {
			removeDir()
			return nil, nil, nil, err
		}
	}
	return client, server, func() {
		client.Close()
		server.Close()
		removeDir()
	}, nil
}

// tlsPair runs a mutual TLS handshake over a connected pair of TCP
// sockets: the floor of a TLS transport, as the plain pair is of TCP.
func tlsPair(c, s net.Conn) (client, server net.Conn, err error) {
	ccfg := benchTLS()
	ccfg.ServerName = "127.0.0.1"
	tc, ts := tls.Client(c, ccfg), tls.Server(s, benchTLS())
	done := make(chan error, 1)
	go func() { done <- ts.Handshake() }()
	if err = tc.Handshake(); err != nil {
		c.Close() // the server's handshake ends too
		s.Close()
	}
	if serr := <-done; err == nil {
		err = serr
	}
	if err != nil {
		c.Close()
		s.Close()
		return nil, nil, fmt.Errorf("tls handshake: %w", err)
	}
	return tc, ts, nil
}

// blockingFD returns a blocking duplicate of a socket's descriptor.
func blockingFD(c net.Conn) (int, func(), error) {
	f, err := c.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		return 0, nil, err
	}
	fd := int(f.Fd())
	if err := syscall.SetNonblock(fd, false); err != nil {
		f.Close()
		return 0, nil, err
	}
	return fd, func() { f.Close() }, nil
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Read(fd, b)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
}

func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		b = b[n:]
	}
	return nil
}

func rungL0(kind string, cfg TxBudgetConfig) ([]time.Duration, error) {
	c, s, cleanup, err := socketPair(kind)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfd, cclose, err := blockingFD(c)
	if err != nil {
		return nil, err
	}
	defer cclose()
	sfd, sclose, err := blockingFD(s)
	if err != nil {
		return nil, err
	}
	defer sclose()
	size := cfg.HeaderLen + cfg.PayloadLen
	echoErr := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, size)
		for i := 0; i < warmup+cfg.Iters; i++ {
			if err := readFull(sfd, buf); err != nil {
				echoErr <- err
				return
			}
			if err := writeFull(sfd, buf); err != nil {
				echoErr <- err
				return
			}
		}
		echoErr <- nil
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, size)
	rtts := make([]time.Duration, 0, cfg.Iters)
	for i := 0; i < warmup+cfg.Iters; i++ {
		t0 := time.Now()
		if err := writeFull(cfd, buf); err != nil {
			return nil, err
		}
		if err := readFull(cfd, buf); err != nil {
			return nil, err
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, <-echoErr
}

func rungL1(kind string, cfg TxBudgetConfig) ([]time.Duration, error) {
	return socketPingPong(kind, cfg.HeaderLen+cfg.PayloadLen, cfg.Iters)
}

// socketPingPong echoes size-byte messages over one plain socket of kind,
// with goroutines and the netpoller, and returns iters round-trip times.
func socketPingPong(kind string, size, iters int) ([]time.Duration, error) {
	c, s, cleanup, err := socketPair(kind)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	echoErr := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for i := 0; i < warmup+iters; i++ {
			if _, err := io.ReadFull(s, buf); err != nil {
				echoErr <- err
				return
			}
			if _, err := s.Write(buf); err != nil {
				echoErr <- err
				return
			}
		}
		echoErr <- nil
	}()
	buf := make([]byte, size)
	rtts := make([]time.Duration, 0, iters)
	for i := 0; i < warmup+iters; i++ {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, err
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, <-echoErr
}

func rungL2(kind string, cfg TxBudgetConfig) ([]time.Duration, error) {
	c, s, cleanup, err := socketPair(kind)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	f := ext.Frame{Type: ext.Message, Header: make([]byte, cfg.HeaderLen), Payload: make([]byte, cfg.PayloadLen)}
	echoErr := make(chan error, 1)
	go func() {
		r := frame.NewReader(s, frame.DefaultMaxFrame)
		var out []byte
		for i := 0; i < warmup+cfg.Iters; i++ {
			in, err := r.Next()
			if err != nil {
				echoErr <- err
				return
			}
			out = frame.Append(out[:0], in)
			if _, err := s.Write(out); err != nil {
				echoErr <- err
				return
			}
		}
		echoErr <- nil
	}()
	r := frame.NewReader(c, frame.DefaultMaxFrame)
	var out []byte
	rtts := make([]time.Duration, 0, cfg.Iters)
	for i := 0; i < warmup+cfg.Iters; i++ {
		t0 := time.Now()
		out = frame.Append(out[:0], f)
		if _, err := c.Write(out); err != nil {
			return nil, err
		}
		if _, err := r.Next(); err != nil {
			return nil, err
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, <-echoErr
}

func rungL3(kind string, cfg TxBudgetConfig) ([]time.Duration, error) {
	f := ext.Frame{Type: ext.Message, Header: make([]byte, cfg.HeaderLen), Payload: make([]byte, cfg.PayloadLen)}
	rtts := make([]time.Duration, 0, cfg.Iters)
	done := make(chan error, 1)
	var a, b *Node
	var t0 time.Time
	count := 0
	// A's sink: one round trip ended; start the next.
	onA := func(batch []ext.InboundMessage) {
		ext.DoneAll(batch)
		for range batch {
			if count >= warmup {
				rtts = append(rtts, time.Since(t0))
			}
			count++
			if count == warmup+cfg.Iters {
				done <- nil
				return
			}
			t0 = time.Now()
			if _, err := a.T.Send(b.ID, f); err != nil {
				done <- err
				return
			}
		}
	}
	// B's sink: echo each request back.
	onB := func(batch []ext.InboundMessage) {
		for _, m := range batch {
			if _, err := b.T.Send(a.ID, m.Frame); err != nil {
				done <- err
			}
			m.Done()
		}
	}
	var err error
	if a, b, err = PairWith(kind, ext.AdapterConfig{OnMessages: onA}, ext.AdapterConfig{OnMessages: onB}); err != nil {
		return nil, err
	}
	defer a.Close()
	defer b.Close()
	t0 = time.Now()
	if _, err := a.T.Send(b.ID, f); err != nil {
		return nil, err
	}
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		err = fmt.Errorf("L3 ping-pong stalled after %d round trips", count)
	}
	return rtts, err
}

func rungL3q(kind string, cfg TxBudgetConfig) ([]time.Duration, error) {
	a, b, err := Pair(kind)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	defer b.Close()
	f := ext.Frame{Type: ext.Message, Header: make([]byte, cfg.HeaderLen), Payload: make([]byte, cfg.PayloadLen)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echoErr := make(chan error, 1)
	go func() {
		var batch []ext.InboundMessage
		for n := 0; n < warmup+cfg.Iters; {
			var err error
			if batch, err = b.Adapter.Messages().PopAll(ctx, batch[:0]); err != nil {
				echoErr <- err
				return
			}
			for _, m := range batch {
				_, err := b.T.Send(a.ID, m.Frame)
				m.Done()
				if err != nil {
					echoErr <- err
					return
				}
				n++
			}
		}
		echoErr <- nil
	}()
	var batch []ext.InboundMessage
	rtts := make([]time.Duration, 0, cfg.Iters)
	for i := 0; i < warmup+cfg.Iters; i++ {
		t0 := time.Now()
		if _, err := a.T.Send(b.ID, f); err != nil {
			return nil, err
		}
		if batch, err = a.Adapter.Messages().PopAll(ctx, batch[:0]); err != nil {
			return nil, err
		}
		for _, m := range batch {
			m.Done()
		}
		if i >= warmup {
			rtts = append(rtts, time.Since(t0))
		}
	}
	return rtts, <-echoErr
}
