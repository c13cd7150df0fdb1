package robustness_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo"
)

// logRecords is a slog handler that keeps every record's message and
// attributes.
type logRecords struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logRecords) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}

// A peer's life as a user sees it, with a real process: its first
// connection and its handshake are events and Info lines, a thousand calls log nothing, a SIGKILL is a
// Lost event (and a line naming the instance) at once, and the process
// restarted at the same address is a Restarted event.
func TestPeerEventsOfAKilledAndRestartedProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	old := startServer(t, addr)
	logs := &logRecords{}
	events := make(chan velo.PeerEvent, 64)
	caller := newNode(t, velo.WithLogger(slog.New(logs)), velo.WithPeerEvents(func(ev velo.PeerEvent) { events <- ev }))
	must(t, caller.RegisterPeer(old.hello.PeerInfo))
	oldID := old.hello.PeerInfo.InstanceID
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()

	next := func(want velo.PeerEventKind) velo.PeerEvent {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Kind != want {
				t.Fatalf("event %v (%+v), want %v", ev.Kind, ev, want)
			}
			return ev
		case <-time.After(failAfter):
			t.Fatalf("no %v event", want)
		}
		return velo.PeerEvent{}
	}
	if _, err := caller.Unary(ctx, oldID, "work", nil); err != nil {
		t.Fatal(err)
	}
	if ev := next(velo.PeerConnected); ev.Instance != oldID || ev.Transport != "tcp" || ev.Remote != addr {
		t.Fatalf("connected %+v, want %s over tcp at %s", ev, oldID, addr)
	}
	if !hasLine(logs.snapshot(), "INFO velo: peer connected", "instance="+oldID.String(), "address="+addr) {
		t.Fatalf("no Info line for the connection in %q", logs.snapshot())
	}
	if ev := next(velo.PeerGreeted); ev.Instance != oldID {
		t.Fatalf("greeted %s, want %s", ev.Instance, oldID)
	}
	before := len(logs.snapshot())
	for range 1000 {
		if _, err := caller.Unary(ctx, oldID, "work", nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := logs.snapshot()[before:]; len(got) != 0 {
		t.Fatalf("1,000 calls logged %d records, first %q", len(got), got[0])
	}
	killed := time.Now()
	old.kill(t)
	lost := next(velo.PeerLost)
	if lost.Instance != oldID || lost.Err == nil {
		t.Fatalf("lost event %+v", lost)
	}
	t.Logf("lost reported %v after the kill", time.Since(killed))
	if !hasLine(logs.snapshot(), "INFO velo: peer lost", "instance="+oldID.String()) {
		t.Fatalf("no Info line for the lost peer in %q", logs.snapshot())
	}

	// Calls to the dead peer fail, each after a dial that finds nobody:
	// the loss was reported once and is not reported again per call.
	linesAfterLoss := len(logs.snapshot())
	for range 20 {
		if _, err := caller.Unary(ctx, oldID, "work", nil); err == nil {
			t.Fatal("a call to a killed peer succeeded")
		}
	}
	select {
	case ev := <-events:
		t.Fatalf("event %+v from calls to a peer already reported lost", ev)
	default:
	}
	if got := logs.snapshot()[linesAfterLoss:]; len(got) != 0 {
		t.Fatalf("20 failed calls logged %d records, first %q", len(got), got[0])
	}

	fresh := startServer(t, addr)
	for {
		_, err := caller.Unary(ctx, oldID, "work", nil)
		if err != nil && ctx.Err() == nil {
			select {
			case ev := <-events:
				if ev.Kind == velo.PeerConnected {
					continue // the transport reached the address; the handshake finds who is there
				}
				if ev.Kind != velo.PeerRestarted || ev.NewInstance != fresh.hello.PeerInfo.InstanceID {
					t.Fatalf("event %+v, want restarted to %s", ev, fresh.hello.PeerInfo.InstanceID)
				}
				return
			default:
				continue
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no restarted event")
		}
	}
}

// A peer that shuts down in order is reported as shut down, not lost.
func TestPeerEventOfAGracefulShutdown(t *testing.T) {
	events := make(chan velo.PeerEvent, 64)
	caller := newNode(t, velo.WithPeerEvents(func(ev velo.PeerEvent) { events <- ev }))
	srv := newNode(t)
	must(t, srv.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) { return nil, nil })))
	must(t, caller.RegisterPeer(srv.PeerInfo()))
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if _, err := caller.Unary(ctx, srv.InstanceID(), "work", nil); err != nil {
		t.Fatal(err)
	}
	must(t, srv.Shutdown(ctx))
	for {
		select {
		case ev := <-events:
			switch ev.Kind {
			case velo.PeerConnected, velo.PeerGreeted:
				continue
			case velo.PeerShutDown:
				if ev.Instance != srv.InstanceID() {
					t.Fatalf("shut down %s", ev.Instance)
				}
				return
			default:
				t.Fatalf("event %+v, want shut down", ev)
			}
		case <-ctx.Done():
			t.Fatal("no shut-down event")
		}
	}
}

func hasLine(lines []string, parts ...string) bool {
	for _, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}
