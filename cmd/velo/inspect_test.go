package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

func inspectNode(t *testing.T) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithLogger(quietLog()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// TestInspectPrintsTheView: `velo inspect` against a real node's debug
// handler prints its peer (greeted, with the call held in its handler in
// flight), its lane 0 (connected, with frames written), the mux batcher
// of a stream to it, an anchor waiting for its producer, and the peer
// events.
func TestInspectPrintsTheView(t *testing.T) {
	n, peer := inspectNode(t), inspectNode(t)
	if err := n.RegisterPeer(peer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := peer.RegisterPeer(n.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}), make(chan struct{})
	defer close(gate)
	if err := peer.Register(velo.UnaryHandler("held", func(*velo.Context) ([]byte, error) {
		close(entered)
		<-gate
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go n.Unary(ctx, peer.InstanceID(), "held", nil)
	<-entered
	anchor, err := streaming.CreateAnchor[string](peer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[string](ctx, n.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Finalize()
	if err := sender.Send(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	waiting, err := streaming.CreateAnchor[string](n.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()

	mux := http.NewServeMux()
	mux.Handle("/debug/velo", velo.DebugHandler(n))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var out bytes.Buffer
	if err := inspect(ctx, &out, []string{srv.URL + "/debug/velo"}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	peerLine := lineWith(text, peer.InstanceID().String())
	for _, want := range []string{"tcp", "done", "since"} {
		if !strings.Contains(peerLine, want) {
			t.Errorf("peer line %q lacks %q", peerLine, want)
		}
	}
	if f := strings.Fields(peerLine); len(f) < 9 || f[8] != "1" { // IN FLIGHT, after "since HH:MM:SS"
		t.Errorf("peer line %q: in flight is not 1", peerLine)
	}
	for _, want := range []string{
		"velo node " + n.InstanceID().String(),
		"calls in flight 1",
		"unattached 1",
		"egress",
		"connected",
		"greeted",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if f := laneLine(text, peer.InstanceID().String(), "0"); len(f) < 11 || f[1] != "tcp" || f[3] != "yes" || f[5] == "0" || f[9] == "-" {
		t.Errorf("lane 0 to the peer: %q; want tcp, connected, frames written and a last write:\n%s", f, text)
	}
	if egress := lineWith(text, "egress"); !strings.Contains(egress, "live") || !strings.Contains(egress, "/32") {
		t.Errorf("mux line %q: no live batcher with its credit window", egress)
	}
}

// laneLine returns the fields of the LANES row of instance's lane.
func laneLine(text, instance, lane string) []string {
	_, rest, _ := strings.Cut(text, "\nLANES\n")
	rest, _, _ = strings.Cut(rest, "\n\n")
	for _, l := range strings.Split(rest, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == instance && f[2] == lane {
			return f
		}
	}
	return nil
}

func lineWith(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) && !strings.HasPrefix(l, "velo node") {
			return l
		}
	}
	return ""
}

// signalWriter tells after its nth write of the header line.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	views int
	after int
	done  chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.HasPrefix(p, []byte("velo node ")) {
		if w.views++; w.views == w.after {
			close(w.done)
		}
	}
	return w.buf.Write(p)
}

// TestInspectWatch: --watch reads the node again until its context ends,
// clearing the screen before each view.
func TestInspectWatch(t *testing.T) {
	n := inspectNode(t)
	srv := httptest.NewServer(velo.DebugHandler(n))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	w := &signalWriter{after: 3, done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- inspect(ctx, w, []string{"--watch", "--interval", "1ms", srv.URL}) }()
	<-w.done
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(w.buf.String(), "\033[2J"); c < 3 {
		t.Fatalf("%d screen clears for 3 views", c)
	}
}

// TestInspectRefusesWhatIsNotAView: a URL that serves something else, or
// nothing, is an error, not an empty table.
func TestInspectRefusesWhatIsNotAView(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") != "json" {
			t.Errorf("asked for %s, not the JSON form", r.URL)
		}
		w.Write([]byte(`{"hello": 1}`))
	}))
	defer srv.Close()
	var out bytes.Buffer
	if err := inspect(context.Background(), &out, []string{srv.URL}); err == nil || !strings.Contains(err.Error(), "not a velo debug view") {
		t.Fatalf("err = %v", err)
	}
	srv.Close()
	if err := inspect(context.Background(), &out, []string{srv.URL}); err == nil {
		t.Fatal("a closed server gave no error")
	}
	if err := inspect(context.Background(), &out, nil); err == nil {
		t.Fatal("no URL gave no error")
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// FuzzPrintView: whatever a URL answers, printing it returns an error or
// prints; it never panics.
func FuzzPrintView(f *testing.F) {
	f.Add([]byte(`{"instance":"x","peers":[{"instance":"p","connected":true,"connected_since":"2026-01-02T03:04:05Z","in_flight":2}],` +
		`"mux":[{"worker":"w","batchers":[{"lane":0,"credit":3,"window":32}],"ingress":[{"lane":1}]}],` +
		`"anchors":{"total":1,"by_phase":{"unattached":1},"oldest":[{"id":"..ab","phase":"unattached","expires_in_s":3}]},` +
		`"events":[{"kind":"lost","err":"boom"}]}`))
	f.Add([]byte(`{"instance":"x","anchors":{"oldest":[{}]},"events":[{}]}`))
	f.Add([]byte(`{"peers":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var out bytes.Buffer
		printView(&out, body)
	})
}
