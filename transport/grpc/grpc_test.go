package grpc_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/velo-go/velo/ext"
	vgrpc "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory(more ...vgrpc.Option) transporttest.Factory {
	return transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			opts := append([]vgrpc.Option(nil), more...)
			if o.Lanes > 0 {
				opts = append(opts, vgrpc.WithLanes(o.Lanes))
			}
			if o.ChannelBytes > 0 {
				opts = append(opts, vgrpc.WithChannelBytes(o.ChannelBytes))
			}
			if o.TeardownGrace > 0 {
				opts = append(opts, vgrpc.WithTeardownGrace(o.TeardownGrace))
			}
			if o.MaxFrameSize > 0 {
				opts = append(opts, vgrpc.WithMaxFrameSize(o.MaxFrameSize))
			}
			tr, err := vgrpc.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: dialRawStream,
		Kill:    vgrpc.Kill,
	}
}

func TestConformance(t *testing.T) { transporttest.Run(t, factory()) }

// rawCodec carries a message's bytes as they are, so a test can send a
// gRPC message that is no FramedData at all.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}

// streamConn is the suite's raw connection for a transport that is no
// byte stream: one gRPC stream on the VeloStreaming method, each Write
// one message of arbitrary bytes, each Read one message back. The end of
// the stream, whatever its status, reads as io.EOF: the receiver closed
// this "connection".
type streamConn struct {
	cc     *ggrpc.ClientConn
	cancel context.CancelFunc
	stream ggrpc.ClientStream

	once  sync.Once
	recvd chan recvResult
	mu    sync.Mutex
	dl    time.Time
}

type recvResult struct {
	b   []byte
	err error
}

func dialRawStream(ep []byte) (net.Conn, error) {
	return dialRawStreamWith(insecure.NewCredentials())(ep)
}

// dialRawStreamWith is dialRawStream over creds.
func dialRawStreamWith(creds credentials.TransportCredentials) func([]byte) (net.Conn, error) {
	return func(ep []byte) (net.Conn, error) { return dialRaw(ep, creds) }
}

func dialRaw(ep []byte, creds credentials.TransportCredentials) (net.Conn, error) {
	addr, err := tcp.DialAddr(ep)
	if err != nil {
		return nil, err
	}
	cc, err := ggrpc.NewClient("passthrough:///"+addr,
		ggrpc.WithTransportCredentials(creds),
		ggrpc.WithDefaultCallOptions(ggrpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := cc.NewStream(ctx, &ggrpc.StreamDesc{ServerStreams: true, ClientStreams: true}, vgrpc.FullMethod)
	if err != nil {
		cancel()
		cc.Close()
		return nil, err
	}
	return &streamConn{cc: cc, cancel: cancel, stream: stream, recvd: make(chan recvResult, 1)}, nil
}

func (c *streamConn) Write(b []byte) (int, error) {
	m := bytes.Clone(b)
	if err := c.stream.SendMsg(&m); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *streamConn) Read(p []byte) (int, error) {
	// One receiver goroutine, so a Read that timed out leaves no second
	// RecvMsg running.
	c.once.Do(func() {
		go func() {
			for {
				var m []byte
				err := c.stream.RecvMsg(&m)
				if err != nil {
					err = io.EOF
				}
				c.recvd <- recvResult{m, err}
				if err != nil {
					return
				}
			}
		}()
	})
	c.mu.Lock()
	dl := c.dl
	c.mu.Unlock()
	var timeout <-chan time.Time
	if !dl.IsZero() {
		timer := time.NewTimer(time.Until(dl))
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case r := <-c.recvd:
		return copy(p, r.b), r.err
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *streamConn) Close() error {
	c.cancel()
	return c.cc.Close()
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.dl = t
	c.mu.Unlock()
	return nil
}

func (c *streamConn) SetDeadline(t time.Time) error    { return c.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
func (c *streamConn) LocalAddr() net.Addr              { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return streamAddr{} }

type streamAddr struct{}

func (streamAddr) Network() string { return "grpc" }
func (streamAddr) String() string  { return vgrpc.FullMethod }

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The golden vectors: FramedData as prost writes it (fields in order,
// each tag field<<3|2, proto3 empty fields left out), preamble
// [u16 version=1][u8 type][u32 header len][u32 payload len].
var framedGolden = []struct {
	name string
	f    ext.Frame
	hex  string
}{
	{"message", ext.Frame{Type: ext.Message, Header: []byte("hdr"), Payload: []byte("pay")},
		"0a0b" + "0001" + "00" + "00000003" + "00000003" + "1203686472" + "1a03706179"},
	{"drain echo", ext.Frame{Type: ext.ShuttingDown, Header: []byte("hdr")},
		"0a0b" + "0001" + "04" + "00000003" + "00000000" + "1203686472"},
	{"goodbye", ext.Frame{Type: ext.ShuttingDown},
		"0a0b" + "0001" + "04" + "00000000" + "00000000"},
	{"response, 200-byte payload", ext.Frame{Type: ext.Response, Header: []byte{7}, Payload: bytes.Repeat([]byte{0xAB}, 200)},
		"0a0b" + "0001" + "01" + "00000001" + "000000c8" + "120107" + "1ac801" + hex.EncodeToString(bytes.Repeat([]byte{0xAB}, 200))},
}

func TestFramedDataGolden(t *testing.T) {
	for _, g := range framedGolden {
		t.Run(g.name, func(t *testing.T) {
			want := unhex(t, g.hex)
			if got := vgrpc.AppendFramedData(nil, g.f); !bytes.Equal(got, want) {
				t.Fatalf("encoded\n %x\nwant\n %x", got, want)
			}
			f, err := vgrpc.ParseFramedData(want, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != g.f.Type || !bytes.Equal(f.Header, g.f.Header) || !bytes.Equal(f.Payload, g.f.Payload) {
				t.Fatalf("decoded %v %x %x", f.Type, f.Header, f.Payload)
			}
		})
	}
}

// TestParseFramedDataIsAProtobufDecoder: fields in any order, unknown
// fields and repeated fields read as protobuf says; what cannot be a
// frame is refused.
func TestParseFramedDataIsAProtobufDecoder(t *testing.T) {
	pre := "0a0b" + "0001" + "00" + "00000001" + "00000001"
	ok := map[string]string{
		"fields reversed":             "1a0179" + "120178" + pre,
		"unknown varint and bytes":    "2005" + pre + "2a0100" + "120178" + "1a0179",
		"last header wins":            "120161" + pre + "120178" + "1a0179",
		"unknown fixed32 and fixed64": "3d01020304" + "410102030405060708" + pre + "120178" + "1a0179",
	}
	for name, h := range ok {
		f, err := vgrpc.ParseFramedData(unhex(t, h), 1<<20)
		if err != nil || string(f.Header) != "x" || string(f.Payload) != "y" {
			t.Errorf("%s: %q %q %v", name, f.Header, f.Payload, err)
		}
	}
	bad := map[string]string{
		"empty":                 "",
		"no preamble":           "120178",
		"short preamble":        "0a0a000100000000010000",
		"wrong version":         "0a0b" + "0002" + "00" + "00000000" + "00000000",
		"unknown type":          "0a0b" + "0001" + "09" + "00000000" + "00000000",
		"lengths do not match":  pre + "120178",
		"truncated bytes":       pre + "1205",
		"field number zero":     "0007000000010000000001ffff",
		"too large for the max": "0a0b" + "0001" + "00" + "00000000" + "00100001",
	}
	for name, h := range bad {
		if _, err := vgrpc.ParseFramedData(unhex(t, h), 1<<20); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// TestAddressEntryGolden: the entry is the reference's rmp_serde list of
// InterfaceEndpoint [name, ip, port, prefix_len, numa_node]; the legacy
// "grpc://host:port" text of the reference's tests is read too.
func TestAddressEntryGolden(t *testing.T) {
	tr, err := vgrpc.New(vgrpc.WithAdvertiseAddr("127.0.0.1:50051"))
	if err != nil {
		t.Fatal(err)
	}
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	ep, err := tr.Start(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { tr.Shutdown(); <-tr.Closed(); a.Close() }()
	want := unhex(t, "91"+"95"+"a0"+"a93132372e302e302e31"+"cdc383"+"20"+"c0")
	if !bytes.Equal(ep, want) {
		t.Fatalf("entry %x, want %x", ep, want)
	}
	for _, entry := range [][]byte{want, []byte("grpc://127.0.0.1:50051"), []byte("127.0.0.1:50051")} {
		if err := tr.Register(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{vgrpc.Key: entry}}); err != nil {
			t.Errorf("register %q: %v", entry, err)
		}
	}
	if err := tr.Register(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{vgrpc.Key: []byte("nonsense")}}); err == nil {
		t.Error("registered a peer whose entry names no address")
	}
	if vgrpc.FullMethod != "/velo.streaming.v1.VeloStreaming/Stream" {
		t.Errorf("method %q", vgrpc.FullMethod)
	}
}

// TestSendBeforeStartIsRefused: with no adapter yet there is nobody to
// tell a frame's fate, so the send fails at once.
func TestSendBeforeStartIsRefused(t *testing.T) {
	tr, err := vgrpc.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { tr.Shutdown(); <-tr.Closed() }()
	id := ext.NewInstanceID()
	if err := tr.Register(ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{vgrpc.Key: []byte("127.0.0.1:1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Send(id, ext.Frame{Type: ext.Message}); err == nil {
		t.Fatal("a send before Start was taken")
	}
}
