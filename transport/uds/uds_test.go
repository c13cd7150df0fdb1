package uds_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/transporttest"
	"github.com/velo-go/velo/transport/uds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func factory() transporttest.Factory {
	return transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			var opts []uds.Option
			if o.Lanes > 0 {
				opts = append(opts, uds.WithLanes(o.Lanes))
			}
			if o.ChannelBytes > 0 {
				opts = append(opts, uds.WithChannelBytes(o.ChannelBytes))
			}
			if o.TeardownGrace > 0 {
				opts = append(opts, uds.WithTeardownGrace(o.TeardownGrace))
			}
			if o.MaxFrameSize > 0 {
				opts = append(opts, uds.WithMaxFrameSize(o.MaxFrameSize))
			}
			tr, err := uds.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DialRaw: func(ep []byte) (net.Conn, error) {
			path, err := uds.SocketPath(ep)
			if err != nil {
				return nil, err
			}
			return net.Dial("unix", path)
		},
		Kill: uds.Kill,
	}
}

func TestConformance(t *testing.T) { transporttest.Run(t, factory()) }

// The address entry is "uds://<path>", as the reference writes it
// (lib/velo/src/transports/uds/transport.rs), and a plain path is read too.
func TestEndpointForm(t *testing.T) {
	for ep, want := range map[string]string{"uds:///tmp/a.sock": "/tmp/a.sock", "/tmp/a.sock": "/tmp/a.sock"} {
		if got, err := uds.SocketPath([]byte(ep)); err != nil || got != want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", ep, got, err, want)
		}
	}
	tr, err := uds.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	if ep := string(n.PeerInfo().Address[uds.Key]); !strings.HasPrefix(ep, "uds:///") {
		t.Errorf("advertised entry %q, want uds://<absolute path>", ep)
	}
	for _, bad := range []string{"", "uds://"} {
		if _, err := uds.SocketPath([]byte(bad)); err == nil {
			t.Errorf("SocketPath(%q) accepted", bad)
		}
	}
}

// WithMaxConnections reaches the transport: with a limit of one, a second
// connection is closed at once and counted.
func TestConnectionLimitOverUDS(t *testing.T) {
	tr, err := uds.New(uds.WithMaxConnections(1))
	if err != nil {
		t.Fatal(err)
	}
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
	path, err := uds.SocketPath(ep)
	if err != nil {
		t.Fatal(err)
	}
	first, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("second connection: read %d bytes, %v; want EOF", n, err)
	}
	if s := tr.Stats(); s.RefusedConnections != 1 {
		t.Fatalf("Stats = %+v, want one refused connection", s)
	}
}
