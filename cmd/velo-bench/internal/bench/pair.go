package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"

	"github.com/velo-go/velo/internal/embedded"
	"github.com/velo-go/velo/internal/testcert"
	grpctr "github.com/velo-go/velo/transport/grpc"
	natstr "github.com/velo-go/velo/transport/nats"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/uds"
	zmqtr "github.com/velo-go/velo/transport/zmq"
)

// Node is one started transport with its adapter, for transport-level harnesses.
type Node struct {
	ID      ext.InstanceID
	T       ext.Transport
	Adapter *ext.TransportAdapter
	Info    ext.PeerInfo
}

// NewTransport builds a transport by name: "tcp", "tls" (TCP with mutual
// TLS 1.3, every node's certificate signed by one CA made for this
// process), "uds", "quic", "grpc" (velo frames over a grpc-go stream),
// "zmq" or
// "nats" (through a NATS server embedded in this process, one per run).
//
// "tcp:N", "tls:N" and "quic:N" build the transport WithLanes(N); the
// transport-level harnesses then spread their frames over the lanes.
func NewTransport(kind string) (ext.Transport, error) {
	if base, n, ok := strings.Cut(kind, ":"); ok {
		lanes, err := strconv.Atoi(n)
		if err != nil || lanes < 1 {
			return nil, fmt.Errorf("transport %q: want KIND:LANES with LANES ≥ 1", kind)
		}
		switch base {
		case "tcp":
			return tcp.New(append(tcpBufferOption(), tcp.WithLanes(lanes))...)
		case "tls":
			return tcp.New(append(tcpBufferOption(), tcp.WithTLS(benchTLS()), tcp.WithLanes(lanes))...)
		case "quic":
			return quic.New(quic.WithLanes(lanes))
		}
		return nil, fmt.Errorf("transport %q: only tcp, tls and quic take lanes", kind)
	}
	switch kind {
	case "tcp":
		return tcp.New(tcpBufferOption()...)
	case "tls":
		return tcp.New(append(tcpBufferOption(), tcp.WithTLS(benchTLS()))...)
	case "uds":
		return uds.New()
	case "quic":
		return quic.New()
	case "grpc":
		return grpctr.New()
	case "zmq":
		return zmqtr.New()
	case "nats":
		srv, err := benchNATS()
		if err != nil {
			return nil, err
		}
		return natstr.New(natstr.WithURL(srv.URL()))
	}
	return nil, fmt.Errorf("unknown transport %q (want tcp, tls, uds, quic, grpc, zmq or nats)", kind)
}

// benchNATS is the NATS server of the "nats" transports of one run.
var benchNATS = sync.OnceValues(func() (*embedded.NATS, error) {
	dir, err := os.MkdirTemp("", "velo-bench-nats-")
	if err != nil {
		return nil, err
	}
	// No JetStream: the transport needs core NATS only, so nothing is
	// written under dir.
	return embedded.StartNATS(dir, func(o *server.Options) { o.JetStream = false })
})

// benchCA signs the certificates of the "tls" transports of one run.
var benchCA = sync.OnceValue(func() *testcert.CA { return testcert.NewCA("velo-bench") })

// benchTLS is a mutual TLS config with a fresh certificate for loopback.
func benchTLS() *tls.Config {
	ca := benchCA()
	return testcert.Mutual(ca, ca.Issue("velo-bench"))
}

// tcpBufferOption reads VELO_TCP_SOCKET_BUFFERS:
// "auto" leaves buffers to the kernel, a number sets them in bytes.
func tcpBufferOption() []tcp.Option {
	v := os.Getenv("VELO_TCP_SOCKET_BUFFERS")
	if v == "" {
		return nil
	}
	if v == "auto" {
		return []tcp.Option{tcp.WithKernelBuffers()}
	}
	if n, err := strconv.Atoi(v); err == nil {
		return []tcp.Option{tcp.WithSocketBuffers(n)}
	}
	return nil
}

// StartNode builds and starts a transport.
func StartNode(kind string) (*Node, error) { return StartNodeWith(kind, ext.AdapterConfig{}) }

// StartNodeWith builds and starts a transport with an adapter config (sinks).
func StartNodeWith(kind string, cfg ext.AdapterConfig) (*Node, error) {
	tr, err := NewTransport(kind)
	if err != nil {
		return nil, err
	}
	n := &Node{ID: ext.NewInstanceID(), T: tr}
	n.Adapter = ext.NewTransportAdapter(ext.NewShutdownState(), cfg)
	ep, err := tr.Start(context.Background(), n.Adapter)
	if err != nil {
		return nil, err
	}
	n.Info = ext.PeerInfo{InstanceID: n.ID, Address: ext.WorkerAddress{tr.Key(): ep}}
	return n, nil
}

// Close shuts the node down and waits for its transport to close.
func (n *Node) Close() {
	n.T.Shutdown()
	select {
	case <-n.T.Closed():
	case <-time.After(5 * time.Second):
	}
	n.Adapter.Close()
}

// Pair starts two nodes that know each other.
func Pair(kind string) (a, b *Node, err error) {
	return PairWith(kind, ext.AdapterConfig{}, ext.AdapterConfig{})
}

// PairWith starts two nodes with their adapter configs.
func PairWith(kind string, ca, cb ext.AdapterConfig) (a, b *Node, err error) {
	if a, err = StartNodeWith(kind, ca); err != nil {
		return nil, nil, err
	}
	if b, err = StartNodeWith(kind, cb); err != nil {
		a.Close()
		return nil, nil, err
	}
	if err = a.T.Register(b.Info); err == nil {
		err = b.T.Register(a.Info)
	}
	if err != nil {
		a.Close()
		b.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}

// NewNode starts a node on a transport of the given kind (NewTransport),
// for the small measuring programs beside the harness (nested, sparse).
func NewNode(ctx context.Context, kind string) (*velo.Node, error) {
	tr, err := NewTransport(kind)
	if err != nil {
		return nil, err
	}
	return velo.New(ctx, velo.WithTransport(tr))
}
