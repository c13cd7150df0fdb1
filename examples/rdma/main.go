//go:build ucx

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/ucx"
)

// card is what the owner tells the consumer.
type card struct {
	Peer   ext.PeerInfo `json:"peer"`
	Handle string       `json:"handle"`
}

func main() {
	role := flag.String("role", "", "owner or consumer (default: start both as child processes)")
	size := flag.Int("size", 8<<20, "payload bytes")
	flag.Parse()
	var err error
	switch *role {
	case "":
		err = parent(*size)
	case "owner":
		err = owner(*size)
	case "consumer":
		err = consumer(*size)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		log.Fatalf("rdma %s: %v", *role, err)
	}
}

// node is TCP for the control plane and UCX beside it with the RDMA path.
func node(ctx context.Context, reg *prometheus.Registry) (*velo.Node, error) {
	tr, err := tcp.New()
	if err != nil {
		return nil, err
	}
	// Over shared memory only (UCX_TLS=sm,self) the transport makes its
	// endpoints without peer error handling, which UCX 1.13 lacks there;
	// TCP beside it still sees a dead peer.
	u, err := ucx.New()
	if err != nil {
		return nil, err
	}
	m, err := metrics.Register(reg)
	if err != nil {
		return nil, err
	}
	return velo.New(ctx, velo.WithTransport(tr), velo.WithMetrics(m), velo.WithRDMA(u, velo.RdmaConfig{}))
}

func pattern(i int) byte { return byte(i*31 + i>>8) }

// owner stages the payload, prints its card and serves until stdin ends.
func owner(size int) error {
	ctx := context.Background()
	n, err := node(ctx, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer n.Shutdown(ctx)
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = pattern(i)
	}
	h := n.Rendezvous.RegisterDataPinned(payload)
	if err := json.NewEncoder(os.Stdout).Encode(card{Peer: n.PeerInfo(), Handle: h.String()}); err != nil {
		return err
	}
	// The consumer's node registers with us when it calls; we need not
	// know it. Serve until the parent closes our stdin.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// consumer reads the owner's card from stdin, pulls the payload and checks
// it and the path.
func consumer(size int) error {
	var c card
	if err := json.NewDecoder(os.Stdin).Decode(&c); err != nil {
		return fmt.Errorf("read the owner's card: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	n, err := node(ctx, reg)
	if err != nil {
		return err
	}
	defer n.Shutdown(context.Background())
	// Register the owner before the first get: a get to an owner that is
	// not registered on UCX here offers nothing and takes the chunked path.
	if err := n.RegisterPeer(c.Peer); err != nil {
		return err
	}
	h, err := rendezvous.ParseHandle(c.Handle)
	if err != nil {
		return err
	}
	t0 := time.Now()
	got, lease, err := n.Rendezvous.Get(ctx, h)
	if err != nil {
		return err
	}
	took := time.Since(t0)
	if err := n.Rendezvous.Release(ctx, h, lease); err != nil {
		return err
	}
	if len(got) != size {
		return fmt.Errorf("got %d bytes, want %d", len(got), size)
	}
	for i, b := range got {
		if b != pattern(i) {
			return fmt.Errorf("byte %d is %#x, want %#x", i, b, pattern(i))
		}
	}
	ok := rdmaOK(reg)
	fmt.Printf("consumer: %d bytes in %v, every byte right; rdma_path_total{path=\"rdma\",reason=\"ok\"} = %v\n", size, took, ok)
	if ok < 1 {
		return fmt.Errorf("the transfer did not take the RDMA path (see velo_rendezvous_rdma_path_total's reasons)")
	}
	return nil
}

func rdmaOK(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "velo_rendezvous_rdma_path_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["path"] == "rdma" && labels["reason"] == "ok" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// parent runs both roles as children and passes the owner's card on.
func parent(size int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	sz := fmt.Sprint(size)
	own := exec.Command(exe, "--role", "owner", "--size", sz)
	own.Stderr = os.Stderr
	ownIn, err := own.StdinPipe()
	if err != nil {
		return err
	}
	ownOut, err := own.StdoutPipe()
	if err != nil {
		return err
	}
	if err := own.Start(); err != nil {
		return err
	}
	defer func() { ownIn.Close(); own.Wait() }()
	line, err := bufio.NewReader(ownOut).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the owner printed no card: %w", err)
	}
	con := exec.Command(exe, "--role", "consumer", "--size", sz)
	con.Stdin = strings.NewReader(line)
	con.Stdout, con.Stderr = os.Stdout, os.Stderr
	return con.Run()
}
