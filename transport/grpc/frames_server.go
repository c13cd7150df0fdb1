package grpc

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/velo-go/velo/ext"
)

// The consumer's end of the gRPC frame transport: a gRPC server whose
// every call is one inbound stream.
//
// Each call has two goroutines: grpc-go's handler, which hands the stream
// to the node and returns its status once the node ended it, and a reader
// that moves the request messages into the stream's queue (RecvMsg has no
// deadline, and the node's watchdog needs one).

// frameHandler is the handler type grpc-go checks frameServiceDesc against.
type frameHandler interface {
	serveFrames(ggrpc.ServerStream) error
}

// frameServiceDesc is VeloStreaming again, served by the frame listener.
var frameServiceDesc = ggrpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*frameHandler)(nil),
	Streams: []ggrpc.StreamDesc{{
		StreamName:    MethodName,
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, ss ggrpc.ServerStream) error {
			return srv.(frameHandler).serveFrames(ss)
		},
	}},
	Metadata: "velo.proto",
}

// inboundQueue is how many received frames wait for the node's reader:
// the reference's bind channel holds 4096, but its depth only moves the
// point where HTTP/2 flow control pushes back.
const inboundQueue = 256

type frameListener struct {
	t      *FrameTransport
	ln     net.Listener
	entry  []byte
	srv    *ggrpc.Server
	accept chan *frameInbound
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup // Serve and the calls' readers
	// mu orders a call's wg.Add before Close's wg.Wait: grpc-go's Stop
	// does not wait for handlers, so a call may reach its Add after Serve
	// returned and the count fell to zero, while Close waits.
	mu       sync.Mutex
	stopping bool
}

func newFrameListener(t *FrameTransport, ln net.Listener, entry []byte) *frameListener {
	l := &frameListener{t: t, ln: ln, entry: entry, accept: make(chan *frameInbound), closed: make(chan struct{})}
	l.srv = ggrpc.NewServer(
		ggrpc.Creds(serverCreds(t.tls)),
		ggrpc.ForceServerCodecV2(codec{}),
		ggrpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		ggrpc.MaxRecvMsgSize(maxMsg),
		ggrpc.MaxSendMsgSize(maxMsg),
	)
	l.srv.RegisterService(&frameServiceDesc, l)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.srv.Serve(ln)
	}()
	return l
}

func (l *frameListener) Entry() []byte  { return l.entry }
func (l *frameListener) Addr() net.Addr { return l.ln.Addr() }

func (l *frameListener) Accept() (ext.FrameInbound, error) {
	select {
	case in := <-l.accept:
		return in, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the server at once: every call not ended fails (its
// producer sees the stream closed), and its reader returns.
func (l *frameListener) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.stopping = true
		l.mu.Unlock()
		close(l.closed)
		l.srv.Stop()
	})
	l.wg.Wait()
	return nil
}

// serveFrames is one call: it reads the route, hands the stream to the
// node and waits for the node's end of it.
func (l *frameListener) serveFrames(ss ggrpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	route, err := ParseRouteMetadata(md)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	in := newFrameInbound(ss, route)
	select {
	case l.accept <- in:
	case <-l.closed:
		return status.Error(codes.Unavailable, "velo: node stopped")
	case <-ss.Context().Done():
		return status.FromContextError(ss.Context().Err()).Err()
	}
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		// Close waits for no more readers. The server stopped, so the
		// read ends at once, and the node, which took the stream, sees
		// its end.
		in.read()
		return status.Error(codes.Unavailable, "velo: node stopped")
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		in.read()
	}()
	return in.wait(l.closed)
}

// How the node ended an inbound stream.
const (
	endNone = iota
	endConfirmed
	endRefused
	endClosed
)

// frameInbound is one inbound call.
type frameInbound struct {
	ss    ggrpc.ServerStream
	route ext.StreamRoute
	q     chan []byte   // frames read, closed by the reader at the request stream's end
	rerr  error         // why the request stream ended; read after q is closed
	read_ chan struct{} // closed by the reader as it returns

	mu       sync.Mutex
	how      int
	ended    chan struct{} // closed by the node's end (Confirm, Refuse, Close)
	header   bool          // the headers went out
	deadline time.Time
	timer    *time.Timer
}

func newFrameInbound(ss ggrpc.ServerStream, route ext.StreamRoute) *frameInbound {
	return &frameInbound{ss: ss, route: route, q: make(chan []byte, inboundQueue), read_: make(chan struct{}), ended: make(chan struct{})}
}

// read moves the request messages into q until the request stream ends,
// and drops what comes after the node ended the stream.
func (in *frameInbound) read() {
	defer close(in.read_)
	defer close(in.q)
	for {
		var m message
		if err := in.ss.RecvMsg(&m); err != nil {
			in.rerr = err // io.EOF: the producer closed its side
			return
		}
		p, err := ParseStreamFrame(m.in, MaxStreamFrame)
		if err != nil {
			in.rerr = errors.Join(ext.ErrMalformedStream, err)
			return
		}
		select {
		case in.q <- p:
		case <-in.ended:
			// The node is done: what follows its terminal is dropped
			// while the reader waits for the producer's half-close.
		}
	}
}

// wait returns the call's status once the node ended the stream: OK for
// a stream it took whole, once the producer closed its side; NotFound for
// a route it did not bind; Canceled for one it gave up on.
func (in *frameInbound) wait(stopped <-chan struct{}) error {
	select {
	case <-in.ended:
	case <-stopped:
		return status.Error(codes.Unavailable, "velo: node stopped")
	case <-in.ss.Context().Done():
		return status.FromContextError(in.ss.Context().Err()).Err()
	}
	in.mu.Lock()
	how := in.how
	in.mu.Unlock()
	switch how {
	case endRefused:
		return status.Errorf(codes.NotFound, "no routing slot for (anchor_id=%d, session_id=%d)", in.route.AnchorID, in.route.SessionID)
	case endClosed:
		return status.Error(codes.Canceled, "velo: the consumer closed the stream")
	}
	// Confirmed: the call ends once the whole request stream is read.
	select {
	case <-in.read_:
	case <-stopped:
		return status.Error(codes.Unavailable, "velo: node stopped")
	}
	if errors.Is(in.rerr, io.EOF) {
		return nil
	}
	if errors.Is(in.rerr, ext.ErrMalformedStream) {
		return status.Error(codes.InvalidArgument, in.rerr.Error())
	}
	return in.rerr
}

// Route answers the call's headers (the producer's Dial waits for them:
// a node took its stream) and returns the route of its metadata.
func (in *frameInbound) Route() (ext.StreamRoute, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.header && in.how == endNone {
		in.header = true
		if err := in.ss.SendHeader(nil); err != nil {
			return ext.StreamRoute{}, err
		}
	}
	return in.route, nil
}

// Recv returns the next frame.
func (in *frameInbound) Recv() ([]byte, error) {
	in.mu.Lock()
	d, t := in.deadline, in.timer
	in.mu.Unlock()
	if d.IsZero() {
		select {
		case p, ok := <-in.q:
			return in.got(p, ok)
		case <-in.ended:
			return nil, ext.ErrStreamClosed
		}
	}
	t.Reset(time.Until(d))
	defer t.Stop()
	select {
	case p, ok := <-in.q:
		return in.got(p, ok)
	case <-in.ended:
		return nil, ext.ErrStreamClosed
	case <-t.C:
		return nil, errDeadline
	}
}

func (in *frameInbound) got(p []byte, ok bool) ([]byte, error) {
	if ok {
		return p, nil
	}
	return nil, in.rerr
}

func (in *frameInbound) SetReadDeadline(t time.Time) error {
	in.mu.Lock()
	in.deadline = t
	if in.timer == nil {
		in.timer = time.NewTimer(time.Hour)
		in.timer.Stop()
	}
	in.mu.Unlock()
	return nil
}

func (in *frameInbound) end(how int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.how == endNone {
		in.how = how
		close(in.ended)
	}
	return nil
}

func (in *frameInbound) Confirm() error { return in.end(endConfirmed) }
func (in *frameInbound) Refuse() error  { return in.end(endRefused) }
func (in *frameInbound) Close() error   { return in.end(endClosed) }
