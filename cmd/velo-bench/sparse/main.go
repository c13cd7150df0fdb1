// Command sparse makes n sequential unary calls between two nodes over TCP
// with a pause between them, for measuring what a call costs the process
// (context switches, futex calls, CPU) at a low call rate: run it under
// perf stat with -n 0 and -n N and take the difference.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
	"github.com/velo-go/velo/ext"
)

func main() {
	n := flag.Int("n", 2000, "calls")
	pause := flag.Duration("pause", time.Millisecond, "pause between calls")
	block := flag.Duration("block", 0, "how long the handler sleeps")
	role := flag.String("role", "", "server: serve echo, write the peer info to -info and exit on quit; client: call the server of -info; empty: both in this process")
	info := flag.String("info", "/tmp/sparse-peer.json", "peer info file")
	flag.Parse()
	ctx := context.Background()
	start := func() *velo.Node {
		nd, err := bench.NewNode(ctx, "tcp")
		if err != nil {
			panic(err)
		}
		return nd
	}
	if *role == "server" {
		b := start()
		quit := make(chan struct{})
		b.Register(velo.UnaryHandler("quit", func(c *velo.Context) ([]byte, error) {
			close(quit)
			return nil, nil
		}))
		b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
			return append([]byte(nil), c.Payload...), nil
		}))
		js, err := json.Marshal(b.PeerInfo())
		if err != nil {
			panic(err)
		}
		os.WriteFile(*info+".tmp", js, 0o644)
		os.Rename(*info+".tmp", *info)
		<-quit
		time.Sleep(10 * time.Millisecond)
		ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b.Shutdown(ctx2)
		return
	}
	a := start()
	var b *velo.Node
	var target ext.PeerInfo
	if *role == "client" {
		js, err := os.ReadFile(*info)
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(js, &target); err != nil {
			panic(err)
		}
	} else {
		b = start()
		target = b.PeerInfo()
	}
	if b != nil {
		if err := b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
			if *block > 0 {
				time.Sleep(*block)
			}
			return append([]byte(nil), c.Payload...), nil
		})); err != nil {
			panic(err)
		}
	}
	if err := a.RegisterPeer(target); err != nil {
		panic(err)
	}
	payload := make([]byte, 64)
	for range 20 { // warm up: connections, lanes
		if _, err := a.Unary(ctx, target.InstanceID, "echo", payload); err != nil {
			panic(err)
		}
	}
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	t0 := time.Now()
	for range *n {
		time.Sleep(*pause)
		if _, err := a.Unary(ctx, target.InstanceID, "echo", payload); err != nil {
			panic(err)
		}
	}
	el := time.Since(t0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	if *n > 0 {
		cpu := func(r *syscall.Rusage) time.Duration {
			return time.Duration(r.Utime.Nano() + r.Stime.Nano())
		}
		fmt.Fprintf(os.Stderr, "rusage per call: cs %.2f (vol %.2f) cpu %v wall %v\n",
			float64(r1.Nvcsw+r1.Nivcsw-r0.Nvcsw-r0.Nivcsw)/float64(*n),
			float64(r1.Nvcsw-r0.Nvcsw)/float64(*n),
			(cpu(&r1)-cpu(&r0))/time.Duration(*n), el/time.Duration(*n))
	}
	if b == nil {
		a.Unary(ctx, target.InstanceID, "quit", nil)
	}
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	a.Shutdown(ctx2)
	if b != nil {
		b.Shutdown(ctx2)
	}
}
