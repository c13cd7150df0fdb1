package embedded

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS is a running in-process nats-server.
type NATS struct {
	srv *server.Server
}

// StartNATS starts nats-server on a random loopback port with JetStream
// storing under dir.
func StartNATS(dir string) (*NATS, error) {
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  dir,
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

// URL is the client URL, nats://127.0.0.1:<port>.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Stop shuts the server down and waits for it.
func (n *NATS) Stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}
