package tcp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
)

// failAfter bounds every wait; it only detects a failure.
const failAfter = 5 * time.Second

type tnode struct {
	id ext.InstanceID
	tr ext.Transport
	a  *ext.TransportAdapter
	ep []byte
}

// startNode builds and starts a TCP transport; obs, when set, is installed
// before the transport starts.
func startNode(t *testing.T, obs ext.Observability, opts ...tcp.Option) *tnode {
	t.Helper()
	tr, err := tcp.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if obs != nil {
		tr.SetObservability(obs)
	}
	n := &tnode{id: ext.NewInstanceID(), tr: tr, a: ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})}
	if n.ep, err = tr.Start(context.Background(), n.a); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Shutdown()
		<-tr.Closed()
		n.a.Close()
	})
	return n
}

func (n *tnode) info() ext.PeerInfo {
	return ext.PeerInfo{InstanceID: n.id, Address: ext.WorkerAddress{tcp.Key: n.ep}}
}

// popMessages takes count messages off n, failing after failAfter.
func popMessages(t *testing.T, n *tnode, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	var batch []ext.InboundMessage
	for got := 0; got < count; {
		var err error
		if batch, err = n.a.Messages().PopAll(ctx, batch[:0]); err != nil {
			t.Fatalf("received %d of %d messages: %v", got, count, err)
		}
		got += len(batch)
		ext.DoneAll(batch)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// sock is one socket of this process, read through its descriptor.
type sock struct {
	local, peer int // ports; peer is 0 for a listening socket
	listening   bool
	rcvbuf      int
	sndbuf      int
}

// findSocket finds the one socket of this process that match selects. The
// transport keeps its sockets to itself, so the test reads them through
// /proc/self/fd.
func findSocket(t *testing.T, what string, match func(s sock) bool) sock {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list this process's descriptors: %v", err)
	}
	var found []sock
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "socket:") {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var s sock
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		in4, ok := sa.(*syscall.SockaddrInet4)
		if !ok {
			continue
		}
		s.local = in4.Port
		if pa, err := syscall.Getpeername(fd); err == nil {
			if p4, ok := pa.(*syscall.SockaddrInet4); ok {
				s.peer = p4.Port
			}
		}
		acc, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN)
		if err != nil {
			continue
		}
		s.listening = acc != 0
		if s.rcvbuf, err = syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF); err != nil {
			continue
		}
		if s.sndbuf, err = syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF); err != nil {
			continue
		}
		if match(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: found %d sockets, want 1: %+v", what, len(found), found)
	}
	return found[0]
}

// socketSizes are the buffer sizes of the three sockets a TCP transport
// makes: its listener, a socket it accepted and a socket it dialed.
type socketSizes struct {
	listener, accepted, dialed sock
}

func sizesOf(t *testing.T, opts ...tcp.Option) socketSizes {
	t.Helper()
	n := startNode(t, nil, opts...)
	addr, err := tcp.DialAddr(n.ep)
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, addr)
	var sz socketSizes
	sz.listener = findSocket(t, "listener", func(s sock) bool { return s.local == port && s.listening })

	// A socket the transport accepted: send one request through it, so
	// the transport has accepted and read it.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Payload: []byte("hi")})); err != nil {
		t.Fatal(err)
	}
	popMessages(t, n, 1)
	client := portOf(t, c.LocalAddr().String())
	sz.accepted = findSocket(t, "accepted", func(s sock) bool { return s.local == port && s.peer == client })

	// A socket the transport dialed: send a frame to a raw peer and read it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{tcp.Key: []byte(ln.Addr().String())}}
	if err := n.tr.Register(peer); err != nil {
		t.Fatal(err)
	}
	if _, err := n.tr.Send(peer.InstanceID, ext.Frame{Type: ext.Message, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(failAfter))
	pc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.SetReadDeadline(time.Now().Add(failAfter))
	r := frame.NewReader(pc, frame.DefaultMaxFrame)
	defer r.Close()
	if _, err := r.Next(); err != nil {
		t.Fatalf("reading the dialed connection: %v", err)
	}
	lport, dport := portOf(t, ln.Addr().String()), portOf(t, pc.RemoteAddr().String())
	sz.dialed = findSocket(t, "dialed", func(s sock) bool { return s.local == dport && s.peer == lport })
	return sz
}

// readSysctl reads one integer field of a /proc/sys file, or reports false.
func readSysctl(path string, field int) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if field >= len(f) {
		return 0, false
	}
	v, err := strconv.Atoi(f[field])
	return v, err == nil
}

// socket_buffers_sizes_the_listener_or_leaves_it_to_the_kernel: by default
// the listening socket gets its buffer size before it listens, so accepted
// sockets inherit it, and dialed sockets get it too; WithKernelBuffers sets
// nothing and leaves the kernel default.
func TestSocketBuffersSizeTheListenerOrLeaveItToTheKernel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads socket sizes through /proc/self/fd")
	}
	def := sizesOf(t)
	kern := sizesOf(t, tcp.WithKernelBuffers())

	if def.listener.rcvbuf <= kern.listener.rcvbuf {
		t.Fatalf("listener SO_RCVBUF %d by default, %d with kernel buffers: the default should be larger", def.listener.rcvbuf, kern.listener.rcvbuf)
	}
	if def.accepted.rcvbuf != def.listener.rcvbuf || def.accepted.sndbuf != def.listener.sndbuf {
		t.Fatalf("accepted socket has SO_RCVBUF %d, SO_SNDBUF %d; the listener has %d, %d", def.accepted.rcvbuf, def.accepted.sndbuf, def.listener.rcvbuf, def.listener.sndbuf)
	}
	if def.dialed.rcvbuf != def.listener.rcvbuf || def.dialed.sndbuf != def.listener.sndbuf {
		t.Fatalf("dialed socket has SO_RCVBUF %d, SO_SNDBUF %d; want the listener's %d, %d", def.dialed.rcvbuf, def.dialed.sndbuf, def.listener.rcvbuf, def.listener.sndbuf)
	}
	// Linux clamps a set size to rmem_max/wmem_max and reports it doubled.
	rmax, ok1 := readSysctl("/proc/sys/net/core/rmem_max", 0)
	wmax, ok2 := readSysctl("/proc/sys/net/core/wmem_max", 0)
	if ok1 && ok2 {
		if want := 2 * min(tcp.DefaultSocketBuffer, rmax); def.listener.rcvbuf != want {
			t.Errorf("listener SO_RCVBUF %d, want %d (2 MiB clamped to rmem_max %d, doubled)", def.listener.rcvbuf, want, rmax)
		}
		if want := 2 * min(tcp.DefaultSocketBuffer, wmax); def.listener.sndbuf != want {
			t.Errorf("listener SO_SNDBUF %d, want %d", def.listener.sndbuf, want)
		}
		if size := 256 << 10; rmax >= size && wmax >= size {
			set := sizesOf(t, tcp.WithSocketBuffers(size))
			if set.listener.rcvbuf != 2*size || set.accepted.rcvbuf != 2*size || set.dialed.sndbuf != 2*size {
				t.Errorf("WithSocketBuffers(%d): listener rcvbuf %d, accepted rcvbuf %d, dialed sndbuf %d, want %d", size,
					set.listener.rcvbuf, set.accepted.rcvbuf, set.dialed.sndbuf, 2*size)
			}
		}
	}
	// With nothing set, a new socket starts at the kernel's default.
	if def, ok := readSysctl("/proc/sys/net/ipv4/tcp_rmem", 1); ok && kern.listener.rcvbuf != def {
		t.Errorf("listener SO_RCVBUF %d with kernel buffers, want the kernel default %d", kern.listener.rcvbuf, def)
	}
}

// metricValue is the value of the one series of name whose labels include
// want: a counter or gauge value, or a histogram's sample count.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var vals []float64
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	metric:
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			vals = append(vals, valueOf(m))
		}
	}
	if len(vals) != 1 {
		t.Fatalf("%s%v: %d series match, want 1", name, want, len(vals))
	}
	return vals[0]
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// With a real metrics handle on both ends, the velo_transport_* series
// count each frame once on each side.
func TestMetricsCountFramesOnBothEnds(t *testing.T) {
	regTx, regRx := prometheus.NewRegistry(), prometheus.NewRegistry()
	mTx, err := metrics.Register(regTx)
	if err != nil {
		t.Fatal(err)
	}
	mRx, err := metrics.Register(regRx)
	if err != nil {
		t.Fatal(err)
	}
	rx := startNode(t, mRx.Transport(tcp.Key))
	tx := startNode(t, mTx.Transport(tcp.Key))
	if err := tx.tr.Register(rx.info()); err != nil {
		t.Fatal(err)
	}

	const n = 500
	const payload = 200
	hdr := []byte("header")
	for i := 0; i < n; i++ {
		out, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Message, Header: hdr, Payload: make([]byte, payload)})
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	popMessages(t, rx, n)

	tr := map[string]string{"transport": "tcp"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"transport": "tcp"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// The writer counts a write once it returns, which can be after the
	// receiver has read it.
	written := with("message_type", "message")
	deadline := time.Now().Add(failAfter)
	for metricValue(t, regTx, "velo_transport_frames_written_total", written) < n {
		if time.Now().After(deadline) {
			t.Fatalf("frames_written_total stuck at %v of %d", metricValue(t, regTx, "velo_transport_frames_written_total", written), n)
		}
		runtime.Gosched()
	}

	// The reader counts a batch once the node has taken it, which can be
	// after the test popped its messages.
	accepted := with("direction", "inbound", "outcome", "accepted", "message_type", "message")
	for metricValue(t, regRx, "velo_transport_frames_total", accepted) < n {
		if time.Now().After(deadline) {
			t.Fatalf("inbound frames_total stuck at %v of %d", metricValue(t, regRx, "velo_transport_frames_total", accepted), n)
		}
		runtime.Gosched()
	}

	checks := []struct {
		reg       *prometheus.Registry
		side      string
		name      string
		labels    map[string]string
		min, max  float64
		wantExact bool
	}{
		{regTx, "sender", "velo_transport_frames_total", with("direction", "outbound", "outcome", "accepted", "message_type", "message"), n, n, true},
		{regTx, "sender", "velo_transport_frame_bytes_total", with("direction", "outbound", "message_type", "message"), n * (payload + 6), n * (payload + 6), true},
		{regRx, "receiver", "velo_transport_frames_total", with("direction", "inbound", "outcome", "accepted", "message_type", "message"), n, n, true},
		{regRx, "receiver", "velo_transport_frame_bytes_total", with("direction", "inbound", "message_type", "message"), n * (payload + 6), n * (payload + 6), true},
		{regTx, "sender", "velo_transport_frames_written_total", written, n, n, true},
		{regTx, "sender", "velo_transport_write_duration_seconds", tr, 1, n, false},
		{regTx, "sender", "velo_transport_egress_queue_wait_seconds", tr, n, n, true},
		{regTx, "sender", "velo_transport_registered_peers", tr, 1, 1, true},
		{regTx, "sender", "velo_transport_active_connections", tr, 1, 1e9, false},
		{regRx, "receiver", "velo_transport_active_connections", tr, 1, 1e9, false},
		{regTx, "sender", "velo_transport_frames_total", with("direction", "outbound", "outcome", "rejected", "message_type", "message"), 0, 0, true},
		{regRx, "receiver", "velo_transport_frames_total", with("direction", "inbound", "outcome", "rejected", "message_type", "message"), 0, 0, true},
	}
	for _, c := range checks {
		v := metricValue(t, c.reg, c.name, c.labels)
		if v < c.min || v > c.max {
			if c.wantExact {
				t.Errorf("%s: %s%v = %v, want %v", c.side, c.name, c.labels, v, c.min)
			} else {
				t.Errorf("%s: %s%v = %v, want in [%v, %v]", c.side, c.name, c.labels, v, c.min, c.max)
			}
		}
	}
}

// Health checks through the public TCP transport: a live peer is healthy,
// a port with nothing listening gives the dial error, an unknown id gives
// ErrPeerNotRegistered.
func TestCheckHealthOverTCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	rx := startNode(t, nil)
	tx := startNode(t, nil)
	if err := tx.tr.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	if err := tx.tr.CheckHealth(ctx, rx.id); err != nil {
		t.Fatalf("live peer: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{tcp.Key: []byte(ln.Addr().String())}}
	ln.Close()
	if err := tx.tr.Register(dead); err != nil {
		t.Fatal(err)
	}
	if err := tx.tr.CheckHealth(ctx, dead.InstanceID); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("nothing listening: %v, want a refused dial", err)
	}
	if err := tx.tr.CheckHealth(ctx, ext.NewInstanceID()); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("unknown peer: %v, want ErrPeerNotRegistered", err)
	}
}

// WithMaxConnections and WithFrameTimeout reach the transport, and what they
// close shows in Stats and in the metrics: with a limit of one connection, a
// second is closed at once, and the first, which sent half a frame, is
// closed once the frame timeout passes.
func TestConnectionLimitAndFrameTimeoutOverTCP(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tcp.New(tcp.WithMaxConnections(1), tcp.WithFrameTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tr.SetObservability(m.Transport(tcp.Key))
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	ep, err := tr.Start(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		tr.Shutdown()
		<-tr.Closed()
		a.Close()
	}()

	half, err := dialRaw(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	if _, err := half.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Payload: make([]byte, 100)})[:20]); err != nil {
		t.Fatal(err)
	}
	// Accepted in order: once the second is refused, the first holds the place.
	second, err := dialRaw(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	for _, c := range []net.Conn{second, half} {
		c.SetReadDeadline(time.Now().Add(failAfter))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read %d bytes, %v: want the node to close the connection", n, err)
		}
	}
	if s := tr.Stats(); s.RefusedConnections != 1 || s.StalledConnections != 1 || s.AcceptErrors != 0 {
		t.Fatalf("Stats = %+v, want one refused and one stalled connection", s)
	}
	for reason, want := range map[string]float64{"over_limit": 1, "stalled_frame": 1} {
		if v := metricValue(t, reg, "velo_transport_connections_dropped_total", map[string]string{"transport": "tcp", "reason": reason}); v != want {
			t.Errorf("connections_dropped_total{reason=%q} = %v, want %v", reason, v, want)
		}
	}
}
