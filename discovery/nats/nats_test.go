package nats_test

import (
	"context"
	"os"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/velo-go/velo/discovery/discoverytest"
	"github.com/velo-go/velo/discovery/nats"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/embedded"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	discoverytest.ServeWorkerIfChild(backends)
	if os.Getenv(discoverytest.ChildEnv) != "" {
		discoverytest.RunChild(registerInChild)
		return
	}
	goleak.VerifyTestMain(m)
}

// registerInChild registers info on its own connection, for a child process.
func registerInChild(url string, info ext.PeerInfo) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nats.New(nc, "test").Register(ctx, info)
}

// TestKilledProcessVanishes: a child process registers and is killed
// with SIGKILL. The kernel closes its socket, the server drops its
// subscriptions, and lookups fail: the test reports how long that took.
func TestKilledProcessVanishes(t *testing.T) {
	url := server(t).URL()
	info, kill := discoverytest.StartChild(t, url)
	took := discoverytest.MeasureVanish(t, nats.New(connect(t, url), "test"), info, kill, 5*time.Second)
	t.Logf("a SIGKILLed process's entry vanished %v after the kill", took)
}

// server starts an embedded nats-server for one test.
func server(t *testing.T) *embedded.NATS {
	t.Helper()
	s, err := embedded.StartNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func connect(t *testing.T, url string) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// opener returns clients on their own connections, as processes have.
func opener(url string) discoverytest.PeerOpener {
	return func(t *testing.T) ext.PeerDiscovery { return nats.New(connect(t, url), "test") }
}

func TestPeerConformance(t *testing.T) {
	discoverytest.RunPeer(t, opener(server(t).URL()))
}

func TestThreeNodesFindEachOther(t *testing.T) {
	discoverytest.RunNodes(t, opener(server(t).URL()))
}

// TestClustersStayApart: a peer registered in one cluster is not found
// from another on the same server.
func TestClustersStayApart(t *testing.T) {
	url := server(t).URL()
	a, b := nats.New(connect(t, url), "one"), nats.New(connect(t, url), "two")
	info := discoverytest.NewPeer()
	if err := a.Register(t.Context(), info); err != nil {
		t.Fatal(err)
	}
	discoverytest.MustFind(t, a, info)
	discoverytest.MustNotFind(t, b, info)
}

// TestKilledNodeVanishes: a process that dies closes its socket; the
// server drops its subscriptions and lookups fail at once. NATS has no
// lease: the entry lives as long as the connection.
func TestKilledNodeVanishes(t *testing.T) {
	url := server(t).URL()
	nc := connect(t, url)
	info := discoverytest.NewPeer()
	if err := nats.New(nc, "test").Register(t.Context(), info); err != nil {
		t.Fatal(err)
	}
	took := discoverytest.MeasureVanish(t, nats.New(connect(t, url), "test"), info, nc.Close, 5*time.Second)
	t.Logf("a killed node's entry vanished %v after its connection closed", took)
}

// backends opens both discoveries on one connection of its own, for a
// worker process or a caller.
func backends(url string) (ext.PeerDiscovery, ext.ServiceDiscovery, error) {
	nc, err := natsgo.Connect(url, natsgo.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	return nats.New(nc, "test"), nats.NewServices(nc, "test"), nil
}

func TestServiceConformance(t *testing.T) {
	url := server(t).URL()
	discoverytest.RunService(t, func(t *testing.T) ext.ServiceDiscovery { return nats.NewServices(connect(t, url), "test") })
}

// TestServiceKill: three worker processes serve one service, one is
// SIGKILLed under load; calls by service name go on at once on the two
// left.
func TestServiceKill(t *testing.T) {
	url := server(t).URL()
	var conns []*natsgo.Conn
	t.Cleanup(func() {
		for _, nc := range conns {
			nc.Close()
		}
	})
	discoverytest.RunServiceKill(t, url, func(addr string) (ext.PeerDiscovery, ext.ServiceDiscovery, error) {
		nc, err := natsgo.Connect(addr, natsgo.Timeout(5*time.Second))
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, nc)
		return nats.New(nc, "test"), nats.NewServices(nc, "test"), nil
	})
}

// TestKilledServiceInstanceVanishes: a process registered in a service
// and killed leaves no entry: its subscription went with its connection.
func TestKilledServiceInstanceVanishes(t *testing.T) {
	url := server(t).URL()
	nc := connect(t, url)
	id := ext.NewInstanceID()
	if err := nats.NewServices(nc, "test").RegisterService(t.Context(), "gone", id); err != nil {
		t.Fatal(err)
	}
	d := nats.NewServices(connect(t, url), "test")
	discoverytest.MustList(t, d, "gone", id)
	nc.Close()
	discoverytest.MustList(t, d, "gone")
}

// TestServiceSubjects pins the subjects, with a name that needs escaping.
func TestServiceSubjects(t *testing.T) {
	for got, want := range map[string]string{
		nats.ServiceSubject("c", "llm-worker"):  "c.velo.service.llm-worker.list",
		nats.ServiceEventSubject("c", "a.b *>"): "c.velo.service.a%2Eb%20%2A%3E.events",
		nats.ServicesSubject("c"):               "c.velo.services",
	} {
		if got != want {
			t.Errorf("subject %q, want %q", got, want)
		}
	}
}
