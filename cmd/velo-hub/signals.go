package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// onSignals returns a context cancelled at the first SIGINT or SIGTERM,
// which starts the hub's orderly stop. A second signal means the operator
// will not wait for it: the process exits at once with status 1. stop
// undoes the handling.
func onSignals(log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info("velo-hub: stopping (a second signal exits at once)", "signal", s.String())
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Error("velo-hub: second signal: exiting without waiting for the stop", "signal", s.String())
			os.Exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
