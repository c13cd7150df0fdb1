package velo_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// getSnapshot reads a node's view the way a tool does: over HTTP, as JSON.
func getSnapshot(t *testing.T, url string) velo.Snapshot {
	t.Helper()
	resp, err := http.Get(url + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/json" {
		t.Fatalf("GET json: %s, %q", resp.Status, ct)
	}
	var s velo.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func findPeer(s velo.Snapshot, instance string) (velo.PeerSnapshot, bool) {
	for _, p := range s.Peers {
		if p.Instance == instance {
			return p, true
		}
	}
	return velo.PeerSnapshot{}, false
}

func findMux(s velo.Snapshot, worker string) (velo.MuxPeerSnapshot, bool) {
	for _, m := range s.Mux {
		if m.Worker == worker {
			return m, true
		}
	}
	return velo.MuxPeerSnapshot{}, false
}

// TestDebugViewJSON: two nodes over TCP; the client's view shows the
// server as a greeted peer with a call in flight (held by a gate in the
// handler), the stream it produces over the mux (a batcher with one live
// slot and its credit), the server's view shows that slot on its ingress
// side and an anchor waiting for its producer, and the client's events
// record the server's shutdown.
func TestDebugViewJSON(t *testing.T) {
	shutDown := make(chan struct{}, 1)
	server := node(t)
	client := node(t, velo.WithPeerEvents(func(ev velo.PeerEvent) {
		if ev.Kind == velo.PeerShutDown {
			shutDown <- struct{}{}
		}
	}))
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := server.RegisterPeer(client.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	cview := httptest.NewServer(velo.DebugHandler(client))
	defer cview.Close()
	sview := httptest.NewServer(velo.DebugHandler(server))
	defer sview.Close()

	entered, gate := make(chan struct{}), make(chan struct{})
	if err := server.Register(velo.UnaryHandler("held", func(*velo.Context) ([]byte, error) {
		close(entered)
		<-gate
		return []byte("ok"), nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	callDone := make(chan error, 1)
	go func() {
		_, err := client.Unary(ctx, server.InstanceID(), "held", nil)
		callDone <- err
	}()
	<-entered

	// A stream from the client to an anchor on the server, left open.
	anchor, err := streaming.CreateAnchor[string](server.Streams)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := streaming.AttachAnchor[string](ctx, client.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if v, err := anchor.Next(ctx); err != nil || v != "first" {
		t.Fatalf("Next: %q, %v", v, err)
	}
	// And one anchor no producer has attached to yet.
	waiting, err := streaming.CreateAnchor[string](server.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()

	c := getSnapshot(t, cview.URL)
	if c.Instance != client.InstanceID().String() || c.Worker != client.WorkerID().String() {
		t.Fatalf("snapshot names %s/%s", c.Instance, c.Worker)
	}
	if self, ok := findPeer(c, client.InstanceID().String()); !ok || !self.Self || self.Primary != "loopback" {
		t.Fatalf("the node's own entry: %+v", self)
	}
	p, ok := findPeer(c, server.InstanceID().String())
	if !ok {
		t.Fatalf("client's view has no server peer: %+v", c.Peers)
	}
	if p.Handshake != "done" || p.Primary != "tcp" || p.Lanes < 1 || len(p.Transports) == 0 || p.Worker != server.WorkerID().String() {
		t.Fatalf("server peer: %+v", p)
	}
	if p.InFlight != 1 || c.Calls.InFlight != 1 {
		t.Fatalf("in flight: peer %d, node %d; want 1 (the held call)", p.InFlight, c.Calls.InFlight)
	}
	if len(c.Transports) != 1 || c.Transports[0].Key != "tcp" || c.Transports[0].Stats == nil {
		t.Fatalf("transports: %+v", c.Transports)
	}
	m, ok := findMux(c, server.WorkerID().String())
	if !ok || len(m.Batchers) == 0 {
		t.Fatalf("client's view has no batcher to the server: %+v", c.Mux)
	}
	b := m.Batchers[0]
	if b.LiveSlots != 1 || b.State != "live" || b.Window == 0 || b.Credit > b.Window || m.Instance != server.InstanceID().String() {
		t.Fatalf("batcher: %+v (peer %+v)", b, m)
	}

	s := getSnapshot(t, sview.URL)
	if s.Anchors.ByPhase["unattached"] != 1 || s.Anchors.ByPhase["attached"] != 1 || s.Anchors.Total != 2 {
		t.Fatalf("server anchors: %+v", s.Anchors)
	}
	var sawWaiting, sawMux bool
	for _, a := range s.Anchors.Oldest {
		switch {
		case a.Phase == "unattached" && a.ExpiresInSeconds != nil:
			sawWaiting = true
		case a.Phase == "attached" && a.Via == "mux":
			sawMux = true
		}
		if len(a.ID) > 6 {
			t.Fatalf("anchor id %q shows more than a tag of the handle", a.ID)
		}
	}
	if !sawWaiting || !sawMux {
		t.Fatalf("oldest anchors: %+v", s.Anchors.Oldest)
	}
	sm, ok := findMux(s, client.WorkerID().String())
	if !ok || len(sm.Ingress) == 0 || sm.Ingress[0].LiveSlots != 1 {
		t.Fatalf("server's ingress from the client: %+v", s.Mux)
	}
	if s.Calls.RunningHandlers != 1 {
		t.Fatalf("server runs %d handlers, want 1", s.Calls.RunningHandlers)
	}

	// Ages grow across snapshots: the held call is seen again.
	c2 := getSnapshot(t, cview.URL)
	if c2.Calls.OldestCallSeconds <= 0 {
		t.Fatalf("the held call's age did not grow: %v", c2.Calls.OldestCallSeconds)
	}

	close(gate)
	if err := <-callDone; err != nil {
		t.Fatal(err)
	}
	if err := sender.Finalize(); err != nil {
		t.Fatal(err)
	}
	c3 := getSnapshot(t, cview.URL)
	if p, _ := findPeer(c3, server.InstanceID().String()); p.InFlight != 0 || c3.Calls.InFlight != 0 {
		t.Fatalf("after the answer: %d in flight", c3.Calls.InFlight)
	}

	if err := shutdownWithin(server, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	<-shutDown
	c4 := getSnapshot(t, cview.URL)
	var kinds []string
	found := false
	for _, e := range c4.Events {
		kinds = append(kinds, e.Kind)
		if e.Kind == "shut down" && e.Instance == server.InstanceID().String() {
			found = true
		}
	}
	if !found {
		t.Fatalf("events %v: no shutdown of the server", kinds)
	}
	if kinds[0] != "connected" {
		t.Fatalf("events %v: the first is not the connection", kinds)
	}
}

// TestDebugHandlerServesPageAndRefusesWrites: the page is HTML with its
// own script and no outside reference; only GET and HEAD are answered.
func TestDebugHandlerServesPageAndRefusesWrites(t *testing.T) {
	n := node(t)
	srv := httptest.NewServer(velo.DebugHandler(n))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/velo")
	if err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	buf := make([]byte, 4096)
	for {
		k, err := resp.Body.Read(buf)
		page.WriteString(string(buf[:k]))
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(page.String(), "format=json") {
		t.Fatalf("page: %s %q", resp.Header.Get("Content-Type"), page.String()[:min(200, page.Len())])
	}
	if strings.Contains(page.String(), "src=\"http") || strings.Contains(page.String(), "href=\"http") {
		t.Fatal("the page loads something from elsewhere")
	}
	resp, err = http.Post(srv.URL+"/debug/velo", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", resp.Status)
	}
	resp, err = http.Get(srv.URL + "/debug/velo.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf(".json path: %s", resp.Header.Get("Content-Type"))
	}
}

// TestDebugViewLanes: a client with two TCP lanes to a server; a frame
// sent on lane 1 shows on lane 1 of the server's peer entry in the JSON
// (one frame, its bytes, a last write, connected to the server's
// address), while lane 0 carries the handshake and the call.
func TestDebugViewLanes(t *testing.T) {
	server := node(t)
	tr, err := tcp.New(tcp.WithLanes(2))
	if err != nil {
		t.Fatal(err)
	}
	client, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownWithin(client, 5*time.Second) })
	if err := client.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(velo.UnaryHandler("ping", func(*velo.Context) ([]byte, error) { return nil, nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Unary(ctx, server.InstanceID(), "ping", nil); err != nil {
		t.Fatal(err)
	}
	view := httptest.NewServer(velo.DebugHandler(client))
	defer view.Close()
	if p, _ := findPeer(getSnapshot(t, view.URL), server.InstanceID().String()); len(p.LaneStats) != 2 || p.LaneStats[1].FramesWritten != 0 || p.LaneStats[1].Connected {
		t.Fatalf("before lane 1 is used: %+v", p.LaneStats)
	}
	// A stray response: the server drops it, and nothing else uses lane 1.
	stray := ext.Frame{Type: ext.Response, Header: []byte("stray"), Payload: []byte("lane one")}
	if _, err := tr.SendOnLane(server.InstanceID(), 1, stray); err != nil {
		t.Fatal(err)
	}
	var lanes []velo.LaneSnapshot
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, _ := findPeer(getSnapshot(t, view.URL), server.InstanceID().String())
		lanes = p.LaneStats
		// A lane counts a frame once its write returns, which may be
		// after the peer's answer arrived: lane 0 may show the call a
		// moment after the call returned.
		if len(lanes) == 2 && lanes[1].FramesWritten == 1 && lanes[0].FramesWritten >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lanes never showed their frames: %+v", lanes)
		}
		runtime.Gosched()
	}
	l0, l1 := lanes[0], lanes[1]
	if l1.Transport != "tcp" || l1.Lane != 1 || !l1.Connected || l1.BytesWritten < uint64(stray.Len()) || l1.LastWrite == nil || l1.QueuedFrames != 0 {
		t.Fatalf("lane 1: %+v", l1)
	}
	host := strings.TrimPrefix(l1.Remote, "127.0.0.1:")
	if host == l1.Remote || host == "" {
		t.Fatalf("lane 1 remote %q is not the server's loopback socket", l1.Remote)
	}
	if l0.Lane != 0 || !l0.Connected || l0.FramesWritten < 2 || l0.Remote != l1.Remote {
		t.Fatalf("lane 0 (handshake and call): %+v", l0)
	}
}
