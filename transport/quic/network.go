package quic

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/velo-go/velo/transport/tcp"
)

// network is what the shared stream-socket transport listens and dials
// with: UDP sockets driven by quic-go, each connection's one stream a
// net.Conn.
type network struct {
	o      *options
	id     *identity
	qconf  *quic.Config
	offset int // this dialer's offset into a peer's server sockets
	log    *slog.Logger

	mu      sync.Mutex
	servers []*quic.Transport
	clients []*quic.Transport // by lane, bound on first dial
	ln      *listener
	closed  bool

	lingers sync.WaitGroup // connections waiting for their peer to take the rest
	abrupt  atomic.Bool    // Kill: close everything at once
}

func newNetwork(o *options, id *identity) *network {
	initial, discover := packetSize(o.maxMTU, o.cfg.Logger)
	return &network{
		o:  o,
		id: id,
		qconf: &quic.Config{
			HandshakeIdleTimeout:    o.connectTimeout,
			MaxIdleTimeout:          o.idleTimeout,
			KeepAlivePeriod:         o.keepAlive,
			InitialPacketSize:       initial,
			DisablePathMTUDiscovery: !discover,
			MaxIncomingStreams:      1,  // one stream per connection
			MaxIncomingUniStreams:   -1, // none
			MaxStreamReceiveWindow: func() uint64 {
				if o.streamWindow > 0 {
					return uint64(o.streamWindow)
				}
				return 0
			}(),
		},
		// The fingerprint is random per transport, so dialers spread over a
		// peer's sockets without agreeing on anything.
		offset: int(binary.BigEndian.Uint16(id.fingerprint[:2])),
		log:    o.cfg.Logger,
	}
}

// Listen binds the server sockets: ServerEndpoints of them, each on its
// own port (P to P+n-1 for a fixed port P), and returns the entry that
// lists their ports with the certificate's fingerprint.
func (n *network) Listen(ctx context.Context) (net.Listener, []byte, error) {
	ap, err := netip.ParseAddrPort(n.o.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("quic: listen address %q: %w", n.o.listen, err)
	}
	count := n.o.serverEndpoints
	if ap.Port() != 0 && int(ap.Port())+count-1 > 65535 {
		return nil, nil, fmt.Errorf("quic: %d server endpoints from port %d run past 65535", count, ap.Port())
	}
	ln := &listener{conns: make(chan net.Conn), done: make(chan struct{}), timeout: n.o.cfg.FrameTimeout, n: n}
	var ports []uint16
	fail := func(err error) (net.Listener, []byte, error) {
		for _, tr := range ln.trs {
			tr.Close()
		}
		return nil, nil, err
	}
	for i := 0; i < count; i++ {
		addr := ap
		if ap.Port() != 0 {
			addr = netip.AddrPortFrom(ap.Addr(), ap.Port()+uint16(i))
		}
		uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return fail(fmt.Errorf("quic: server socket %d of %d on %s: %w", i, count, addr, err))
		}
		n.sizeBuffers(uc)
		tr := &quic.Transport{Conn: uc}
		ln.trs = append(ln.trs, tr)
		ql, err := tr.Listen(n.id.serverTLS(), n.qconf)
		if err != nil {
			uc.Close()
			return fail(fmt.Errorf("quic: listen: %w", err))
		}
		ln.qls = append(ln.qls, ql)
		ports = append(ports, uint16(uc.LocalAddr().(*net.UDPAddr).Port))
	}
	bound := netip.AddrPortFrom(ap.Addr(), ports[0])
	var ifs []tcp.Interface
	if n.o.advertise != "" {
		adv, err := netip.ParseAddrPort(n.o.advertise)
		if err != nil {
			return fail(fmt.Errorf("quic: advertise address %q: %w", n.o.advertise, err))
		}
		ifs = tcp.Advertise(adv)
	} else {
		ifs = tcp.Advertise(bound)
	}
	ep := EndpointInfo{Endpoints: ifs, Fingerprint: n.id.fingerprint, Ports: ports}.Encode()
	n.mu.Lock()
	n.servers, n.ln = ln.trs, ln
	n.mu.Unlock()
	ln.start()
	return ln, ep, nil
}

// sizeBuffers requests the configured UDP buffers and warns when the
// kernel granted less: for UDP the receive buffer is the only queue in
// front of quic-go, so a clamp shows up later as dropped datagrams, not as
// an error. Linux reports twice what it grants (its bookkeeping), so a
// granted request reads back at least as large.
func (n *network) sizeBuffers(uc *net.UDPConn) {
	if n.o.recvBuf <= 0 && n.o.sendBuf <= 0 {
		return
	}
	if n.o.recvBuf > 0 {
		uc.SetReadBuffer(n.o.recvBuf)
	}
	if n.o.sendBuf > 0 {
		uc.SetWriteBuffer(n.o.sendBuf)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return
	}
	var rcv, snd int
	raw.Control(func(fd uintptr) {
		rcv, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		snd, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if n.o.recvBuf > 0 && rcv < n.o.recvBuf {
		n.log.Warn("quic: the kernel clamped the UDP receive buffer; raise net.core.rmem_max or expect datagram drops under load",
			"requested", n.o.recvBuf, "effective", rcv)
	}
	if n.o.sendBuf > 0 && snd < n.o.sendBuf {
		n.log.Warn("quic: the kernel clamped the UDP send buffer; raise net.core.wmem_max",
			"requested", n.o.sendBuf, "effective", snd)
	}
}

// CheckEndpoint refuses at registration an entry this transport could
// never dial.
func (n *network) CheckEndpoint(ep []byte) error {
	_, err := DecodeEndpoint(ep)
	return err
}

// Dial dials lane 0 (health checks).
func (n *network) Dial(ctx context.Context, ep []byte) (net.Conn, error) {
	return n.DialLane(ctx, ep, 0)
}

// DialLane connects lane from the lane's own UDP socket to the peer's
// server socket for that lane, pinning the certificate the entry names,
// and opens the connection's one stream.
func (n *network) DialLane(ctx context.Context, ep []byte, lane int) (net.Conn, error) {
	info, err := DecodeEndpoint(ep)
	if err != nil {
		return nil, err
	}
	addr, err := info.LaneAddr(n.offset, lane)
	if err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, markDialError(addr, err)
	}
	tr, err := n.client(lane, ua)
	if err != nil {
		return nil, markDialError(addr, err)
	}
	qc, err := tr.Dial(ctx, ua, pinnedTLS(info.Fingerprint), n.qconf)
	if err != nil {
		return nil, markDialError(addr, err)
	}
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, markDialError(addr, err)
	}
	return &streamConn{n: n, qc: qc, st: st, dialed: true, eof: make(chan struct{})}, nil
}

// client is the dial socket of lane, bound on first use: each lane has its
// own, so each has its own quic-go read loop for its replies.
func (n *network) client(lane int, to *net.UDPAddr) (*quic.Transport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, net.ErrClosed
	}
	if lane < len(n.clients) && n.clients[lane] != nil {
		return n.clients[lane], nil
	}
	local := &net.UDPAddr{IP: net.IPv4zero}
	if to.IP.To4() == nil {
		local.IP = net.IPv6unspecified
	}
	uc, err := net.ListenUDP("udp", local)
	if err != nil {
		return nil, err
	}
	n.sizeBuffers(uc)
	for len(n.clients) <= lane {
		n.clients = append(n.clients, nil)
	}
	tr := &quic.Transport{Conn: uc}
	n.clients[lane] = tr
	return tr, nil
}

// linger closes qc once the peer has closed it (or done, when not nil, is
// closed), or after finishGrace.
func (n *network) linger(qc *quic.Conn, done <-chan struct{}) {
	n.lingers.Add(1)
	go func() {
		defer n.lingers.Done()
		t := time.NewTimer(finishGrace)
		defer t.Stop()
		select {
		case <-qc.Context().Done():
		case <-done:
		case <-t.C:
		}
		qc.CloseWithError(0, "")
	}()
}

// closeAll waits for lingering connections, at most until limit, then
// closes every socket: after that nothing this transport wrote can still
// be delivered, so Closed may report.
func (n *network) closeAll(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		n.lingers.Wait()
		close(done)
	}()
	t := time.NewTimer(limit)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	n.mu.Lock()
	n.closed = true
	trs := append(append([]*quic.Transport(nil), n.servers...), n.clients...)
	n.mu.Unlock()
	for _, tr := range trs {
		if tr != nil {
			tr.Close()
			tr.Conn.Close()
		}
	}
}

// listener hands the shared transport one net.Conn per accepted QUIC
// connection: its first stream, once the dialer has opened it.
type listener struct {
	trs     []*quic.Transport
	qls     []*quic.Listener
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	timeout time.Duration
	n       *network
}

func (l *listener) start() {
	for _, ql := range l.qls {
		go l.acceptLoop(ql)
	}
}

func (l *listener) acceptLoop(ql *quic.Listener) {
	for {
		qc, err := ql.Accept(context.Background())
		if err != nil {
			return
		}
		go l.awaitStream(qc)
	}
}

// awaitStream waits for the dialer's stream, which QUIC shows only once
// data (or its end) arrives on it. A connection that opens none within the
// frame timeout is closed.
func (l *listener) awaitStream(qc *quic.Conn) {
	ctx, cancel := context.WithTimeout(qc.Context(), l.timeout)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := qc.AcceptStream(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return
	}
	c := &streamConn{n: l.n, qc: qc, st: st, eof: make(chan struct{})}
	select {
	case l.conns <- c:
	case <-l.done:
		qc.CloseWithError(0, "")
	}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting. Accepted connections live on (the goodbye is
// written on them after this); their sockets close in closeAll.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		for _, ql := range l.qls {
			ql.Close()
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.trs[0].Conn.LocalAddr() }
