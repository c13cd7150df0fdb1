package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/internal/embedded"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/store/etcdstore"
	"github.com/velo-go/velo/internal/hubconf"
	"github.com/velo-go/velo/transport/tcp"
)

// errStoppedItself: the hub stopped without a signal, as it does when
// its etcd store is fenced (another hub took the prefix).
var errStoppedItself = errors.New("the hub stopped by itself (its store was fenced by another hub, or failed): see the log")

// serve runs the hub until a signal, then stops it in order.
func serve(o options, f hubconf.File, log *slog.Logger) error {
	ctx, stopSignals := onSignals(log)
	defer stopSignals()
	if o.embeddedEtcd != "" {
		// A single-box trial: etcd's own timings, its data kept in the
		// directory, so a hub restarted on it recovers its registrations.
		e, err := embedded.StartEtcdWith(embedded.EtcdConfig{
			Dir: o.embeddedEtcd, Name: "velo-hub", ClientAddr: o.etcdAddr, ReadyTimeout: time.Minute,
		})
		if err != nil {
			return err
		}
		defer e.Stop()
		f.Store.Endpoints = []string{e.Endpoint()}
		log.Info("velo-hub: embedded etcd serving", "dir", o.embeddedEtcd, "endpoint", e.Endpoint())
	}
	opts := []hub.Option{hub.WithLogger(log)}
	var st *etcdstore.Store
	if f.Store.Kind == hubconf.KindEtcd {
		s, cli, err := openEtcd(ctx, f.Store, time.Duration(f.Hub.RegistrantTTLMS)*time.Millisecond, log)
		if err != nil {
			return err
		}
		defer cli.Close() // after the hub closed the store
		st = s
		opts = append(opts, hub.WithStore(st))
	}
	listen := f.Velo.ListenAddr
	if listen == "" {
		listen = defaultVeloListen
	}
	tr, err := tcp.New(tcp.WithListenAddr(listen), tcp.WithAdvertiseAddr(f.Velo.AdvertiseAddr), tcp.WithLogger(log))
	if err != nil {
		return closeAnd(st, fmt.Errorf("velo.listen_addr: %w", err))
	}
	opts = append(opts, hub.WithVelo(velo.WithTransport(tr), velo.WithLogger(log)))
	h, err := hub.New(f.Hub, opts...)
	if err != nil {
		return closeAnd(st, err)
	}
	if err := h.Serve(ctx); err != nil {
		return closeAnd(st, err)
	}
	logServing(log, h, f.Store)
	select {
	case <-ctx.Done():
	case <-h.Done():
		return errStoppedItself
	}
	return shutdown(h, f.Hub, log)
}

// shutdown runs hub.Shutdown, whose waits are each bounded by
// shutdown_timeout_ms. The bound here only catches a stop that hangs
// anyway; the operator's second signal is the quicker way out.
func shutdown(h *hub.Hub, cfg hub.Config, log *slog.Logger) error {
	budget := 8*time.Duration(cfg.ShutdownTimeoutMS)*time.Millisecond + 2*time.Duration(cfg.LockTimeoutMS+cfg.StepTimeoutMS)*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	if err := h.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("velo-hub: stopped", "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// closeAnd closes a store the hub never took over (a failed New or
// Serve leaves it open) and returns err.
func closeAnd(st *etcdstore.Store, err error) error {
	if st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.Close(ctx)
	}
	return err
}

func logServing(log *slog.Logger, h *hub.Hub, s hubconf.Store) {
	attrs := []any{"hub_id", h.ID().String(), "public", h.PublicAddr().String(), "control", h.ControlAddr().String(),
		"velo", veloAddr(h), "store", s.Kind}
	if s.Kind == hubconf.KindEtcd {
		attrs = append(attrs, "etcd", strings.Join(s.Endpoints, ","), "prefix", s.Prefix)
	}
	log.Info("velo-hub: serving", attrs...)
}

// veloAddr spells the hub's velo TCP address for the log.
func veloAddr(h *hub.Hub) string {
	raw, err := h.Node().PeerInfo().Address.Lookup(tcp.Key)
	if err != nil {
		return "?"
	}
	ifs, err := tcp.ParseEndpoint(raw)
	if err != nil {
		return string(raw) // an advertised host:port
	}
	parts := make([]string, len(ifs))
	for i, f := range ifs {
		parts[i] = net.JoinHostPort(f.IP, strconv.Itoa(int(f.Port)))
	}
	return strings.Join(parts, ",")
}
