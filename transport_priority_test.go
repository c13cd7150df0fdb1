package velo_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
)

// startTCPAndQUIC starts a node with a TCP and a QUIC transport and an
// "echo" handler; its metrics go to reg.
func startTCPAndQUIC(t *testing.T, reg *prometheus.Registry) *velo.Node {
	t.Helper()
	tt, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	qt, err := quic.New()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := metrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tt), velo.WithTransport(qt),
		velo.WithMetrics(vm), velo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	if err := n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })); err != nil {
		t.Fatal(err)
	}
	return n
}

// requestsOver counts the requests reg's node sent over transport key.
func requestsOver(t *testing.T, reg *prometheus.Registry, key ext.TransportKey) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != "velo_transport_frames_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["transport"] == string(key) && l["direction"] == "outbound" && l["message_type"] == "message" && l["outcome"] == "accepted" {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A peer reachable over TCP and QUIC is called over the transport of
// higher priority (TCP, 100, over QUIC's 90); registered again without
// its TCP entry, it is called over QUIC, and with TCP back, over TCP
// again.
func TestPeerRoutingFollowsPriorityAndFallsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	creg, sreg := prometheus.NewRegistry(), prometheus.NewRegistry()
	caller, server := startTCPAndQUIC(t, creg), startTCPAndQUIC(t, sreg)
	full := server.PeerInfo()
	if _, ok := full.Address[tcp.Key]; !ok {
		t.Fatalf("no tcp entry in %v", full.Address)
	}
	if _, ok := full.Address[quic.Key]; !ok {
		t.Fatalf("no quic entry in %v", full.Address)
	}
	call := func(what string) {
		t.Helper()
		if got, err := caller.Unary(ctx, server.InstanceID(), "echo", []byte(what)); err != nil || string(got) != what {
			t.Fatalf("%s: %q, %v", what, got, err)
		}
	}
	if err := caller.RegisterPeer(full); err != nil {
		t.Fatal(err)
	}
	call("both")
	tcp0, quic0 := requestsOver(t, creg, tcp.Key), requestsOver(t, creg, quic.Key)
	if tcp0 == 0 || quic0 != 0 {
		t.Fatalf("with both entries: %v requests over tcp, %v over quic; want tcp alone", tcp0, quic0)
	}

	quicOnly := ext.PeerInfo{InstanceID: full.InstanceID, Address: ext.WorkerAddress{quic.Key: full.Address[quic.Key]}}
	for k, v := range full.Address {
		if k != tcp.Key && k != quic.Key {
			quicOnly.Address[k] = v // the stream listener and the like
		}
	}
	if err := caller.RegisterPeer(quicOnly); err != nil {
		t.Fatal(err)
	}
	call("quic only")
	if got := requestsOver(t, creg, quic.Key); got == 0 {
		t.Fatal("without its tcp entry the peer was not called over quic")
	}
	tcp1 := requestsOver(t, creg, tcp.Key)

	if err := caller.RegisterPeer(full); err != nil {
		t.Fatal(err)
	}
	call("both again")
	if got := requestsOver(t, creg, tcp.Key); got <= tcp1 {
		t.Fatal("with its tcp entry back the peer was not called over tcp")
	}
}
