package embedded

import (
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS is a running in-process nats-server.
type NATS struct {
	srv *server.Server
}

// StartNATS starts nats-server on a random loopback port with JetStream
// storing under dir. Each tune, when given, adjusts the options first
// (a larger max_payload, a fixed port for a restart, JetStream off).
func StartNATS(dir string, tune ...func(*server.Options)) (*NATS, error) {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  dir,
	}
	for _, f := range tune {
		f(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready within 10s")
	}
	return &NATS{srv: srv}, nil
}

// Port is the port the server listens on.
func (n *NATS) Port() int { return n.srv.Addr().(*net.TCPAddr).Port }

// URL is the client URL, nats://127.0.0.1:<port>.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Stop shuts the server down and waits for it.
func (n *NATS) Stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}
