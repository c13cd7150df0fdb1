package grpc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testnet"
	"github.com/velo-go/velo/transport/frametransporttest"
	vgrpc "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

// malformedFrames are gRPC messages that are no FramedData frame.
var malformedFrames = [][]byte{
	{0x1a, 0x05, 'a'}, // a payload of 5 bytes holding 1
	{0x1b},            // field 3 as a group start, with no end
	{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // a tag varint over 64 bits
	{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f},                               // a 4 GiB length with nothing behind it
}

// killableFrames builds frame transports over sockets of their own,
// which kill resets: the transport's process died.
type killableFrames struct {
	mu    sync.Mutex
	socks map[ext.FrameTransport]*testnet.Sockets
}

func (k *killableFrames) new(opts ...vgrpc.FrameOption) ext.FrameTransport {
	s := new(testnet.Sockets)
	ft := vgrpc.NewFrameTransport(append(opts, vgrpc.WithFrameNet(s.Listen, s.Dial))...)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.socks == nil {
		k.socks = map[ext.FrameTransport]*testnet.Sockets{}
	}
	k.socks[ft] = s
	return ft
}

func (k *killableFrames) kill(ft ext.FrameTransport) {
	k.mu.Lock()
	s := k.socks[ft]
	k.mu.Unlock()
	s.Kill()
}

func TestFrameConformance(t *testing.T) {
	var k killableFrames
	frametransporttest.Run(t, frametransporttest.Factory{
		New:       func(testing.TB) ext.FrameTransport { return k.new() },
		Kill:      k.kill,
		Confirms:  true,
		DialRaw:   rawFrameDial,
		Malformed: malformedFrames,
	})
}

// rawStream sends each Write as one gRPC message, as it is.
type rawStream struct {
	cc     *ggrpc.ClientConn
	cs     ggrpc.ClientStream
	cancel context.CancelFunc
}

func (r *rawStream) Write(b []byte) (int, error) {
	m := bytes.Clone(b)
	if err := r.cs.SendMsg(&m); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (r *rawStream) Close() error {
	r.cs.CloseSend()
	r.cancel()
	return r.cc.Close()
}

func rawFrameDial(ctx context.Context, entry []byte, route ext.StreamRoute) (io.WriteCloser, error) {
	return rawFrameDialWith(insecure.NewCredentials())(ctx, entry, route)
}

// rawFrameDialWith is rawFrameDial over creds.
func rawFrameDialWith(creds credentials.TransportCredentials) func(context.Context, []byte, ext.StreamRoute) (io.WriteCloser, error) {
	return func(_ context.Context, entry []byte, route ext.StreamRoute) (io.WriteCloser, error) {
		return rawFrame(entry, route, creds)
	}
}

func rawFrame(entry []byte, route ext.StreamRoute, creds credentials.TransportCredentials) (io.WriteCloser, error) {
	addr, err := tcp.DialAddr(entry)
	if err != nil {
		return nil, err
	}
	cc, err := ggrpc.NewClient("passthrough:///"+addr,
		ggrpc.WithTransportCredentials(creds),
		ggrpc.WithDefaultCallOptions(ggrpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	cs, err := cc.NewStream(metadata.NewOutgoingContext(sctx, vgrpc.RouteMetadata(route)), &ggrpc.StreamDesc{ServerStreams: true, ClientStreams: true}, vgrpc.FullMethod)
	if err != nil {
		cancel()
		cc.Close()
		return nil, err
	}
	return &rawStream{cc: cc, cs: cs, cancel: cancel}, nil
}

// silentServer takes a stream's route and every frame, and never ends
// the call until the test does: a consumer that never confirms.
func silentServer(t *testing.T) []byte {
	t.Helper()
	release := make(chan struct{})
	srv := ggrpc.NewServer(ggrpc.ForceServerCodecV2(rawCodec{}))
	srv.RegisterService(&ggrpc.ServiceDesc{
		ServiceName: vgrpc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []ggrpc.StreamDesc{{
			StreamName: vgrpc.MethodName, ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss ggrpc.ServerStream) error {
				ss.SendHeader(nil)
				for {
					var m []byte
					if ss.RecvMsg(&m) != nil {
						break
					}
				}
				select {
				case <-release:
				case <-ss.Context().Done():
				}
				return nil
			},
		}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		close(release)
		srv.Stop()
	})
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return tcp.EncodeEndpoint([]tcp.Interface{{IP: ap.Addr().String(), Port: ap.Port(), PrefixLen: 32}})
}

// A server that takes the whole stream but never ends the call: Finish
// gives up after the ack bound with ErrTerminalNotConfirmed (the stream
// retires Discarded).
func TestFinishWithoutAnAnswerTimesOut(t *testing.T) {
	entry := silentServer(t)
	ft := vgrpc.NewFrameTransport(vgrpc.WithTerminalAckTimeout(50 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := ft.Dial(ctx, entry, ext.StreamRoute{AnchorID: 1, SessionID: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send([][]byte{[]byte("\xa9Finalized")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(context.Background()); !errors.Is(err, vgrpc.ErrTerminalNotConfirmed) {
		t.Fatalf("Finish against a silent server = %v, want ErrTerminalNotConfirmed", err)
	}
}

// A call with a missing or bad route is refused InvalidArgument; the
// dialer sees the stream closed.
func TestBadRouteMetadataRefused(t *testing.T) {
	ln, err := vgrpc.NewFrameTransport().Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := rawFrameDialMD(ln.Entry(), metadata.Pairs(vgrpc.AnchorIDMetadata, "-1", vgrpc.SessionIDMetadata, "2"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var m []byte
	err = w.cs.RecvMsg(&m)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("InvalidArgument")) {
		t.Fatalf("a call with a bad x-anchor-id ended %v, want InvalidArgument", err)
	}
}

func rawFrameDialMD(entry []byte, md metadata.MD) (*rawStream, error) {
	addr, err := tcp.DialAddr(entry)
	if err != nil {
		return nil, err
	}
	cc, err := ggrpc.NewClient("passthrough:///"+addr,
		ggrpc.WithTransportCredentials(insecure.NewCredentials()),
		ggrpc.WithDefaultCallOptions(ggrpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	cs, err := cc.NewStream(metadata.NewOutgoingContext(sctx, md), &ggrpc.StreamDesc{ServerStreams: true, ClientStreams: true}, vgrpc.FullMethod)
	if err != nil {
		cancel()
		cc.Close()
		return nil, err
	}
	return &rawStream{cc: cc, cs: cs, cancel: cancel}, nil
}

// The bytes of one stream frame's FramedData, as the reference's prost
// encoder writes FramedData{preamble: [], header: [], payload}: proto3
// leaves the empty fields out, so only field 3 (tag 0x1a) is there.
func TestStreamFrameGolden(t *testing.T) {
	item := []byte("\x81\xa4Item\xc6\x00\x00\x00\x02hi") // a byte item of "hi"
	want := append([]byte{0x1a, 0x0d}, item...)
	if got := vgrpc.AppendStreamFrame(nil, item); !bytes.Equal(got, want) {
		t.Fatalf("FramedData = %x, want %x", got, want)
	}
	if p, err := vgrpc.ParseStreamFrame(want, vgrpc.MaxStreamFrame); err != nil || !bytes.Equal(p, item) {
		t.Fatalf("ParseStreamFrame = %x, %v", p, err)
	}
	// A message the messenger transport wrote (preamble and header set)
	// yields its payload: the server ignores the other fields.
	full := vgrpc.AppendFramedData(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: item})
	if p, err := vgrpc.ParseStreamFrame(full, vgrpc.MaxStreamFrame); err != nil || !bytes.Equal(p, item) {
		t.Fatalf("ParseStreamFrame of a full FramedData = %x, %v", p, err)
	}
	if vgrpc.FrameKey != "grpc-stream" || vgrpc.AnchorIDMetadata != "x-anchor-id" || vgrpc.SessionIDMetadata != "x-session-id" {
		t.Fatal("the key or metadata names moved from the reference's")
	}
	md := vgrpc.RouteMetadata(ext.StreamRoute{AnchorID: 1<<64 - 1, SessionID: 42})
	if a, s := md.Get("x-anchor-id"), md.Get("x-session-id"); len(a) != 1 || a[0] != "18446744073709551615" || len(s) != 1 || s[0] != "42" {
		t.Fatalf("route metadata %v", md)
	}
}
