package hub

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

func members(t *testing.T, h *Hub, name string) []ext.InstanceID {
	t.Helper()
	st, b := call(t, "GET", pub(h)+protocol.ServicePath(name), nil, "")
	var si protocol.ServiceInstances
	if st != 200 || json.Unmarshal(b, &si) != nil {
		t.Fatalf("service %s: %d %s", name, st, b)
	}
	return si.Instances
}

func svc(names ...string) map[string]any {
	return map[string]any{"services": map[string]any{"names": names}}
}

// TestServicesFollowRegistrations: the payload sets the names exactly; a
// renewal without it keeps them; a fresh registration starts with none;
// PUT and DELETE apply under the current credential only; an
// unregistration drops every name.
func TestServicesFollowRegistrations(t *testing.T) {
	h := startHub(t, testConfig())
	p := fakePeer()
	r1 := register(t, h, p, "", svc("a", "b"))
	if len(members(t, h, "a")) != 1 || len(members(t, h, "b")) != 1 {
		t.Fatal("payload names not served")
	}
	r2 := register(t, h, p, r1.Credential, svc("b", "c"))
	if len(members(t, h, "a")) != 0 || len(members(t, h, "c")) != 1 {
		t.Fatal("payload did not set the names exactly")
	}
	r3 := register(t, h, p, r2.Credential, nil)
	if len(members(t, h, "b")) != 1 || len(members(t, h, "c")) != 1 {
		t.Fatal("a renewal without payload dropped the names")
	}
	put := ctl(h) + protocol.ServiceInstancePath("d", p.InstanceID)
	st, b := call(t, "PUT", put, nil, r2.Credential)
	wantCode(t, "put with an old credential", st, b, protocol.CodeUnauthorized, 401)
	if st, b := call(t, "PUT", put, nil, r3.Credential); st != http.StatusNoContent {
		t.Fatalf("put: %d %s", st, b)
	}
	if len(members(t, h, "d")) != 1 {
		t.Fatal("put did not add")
	}
	st, b = call(t, "GET", pub(h)+protocol.PathServices, nil, "")
	var sl protocol.ServiceList
	if st != 200 || json.Unmarshal(b, &sl) != nil || strings.Join(sl.Services, ",") != "b,c,d" {
		t.Fatalf("list: %d %s", st, b)
	}
	if st, b := call(t, "DELETE", put, nil, r3.Credential); st != http.StatusNoContent || len(members(t, h, "d")) != 0 {
		t.Fatalf("delete: %d %s", st, b)
	}
	if st, _ := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r3.Credential); st != 204 {
		t.Fatal("unregister")
	}
	if len(members(t, h, "b")) != 0 || len(members(t, h, "c")) != 0 {
		t.Fatal("unregister left service entries")
	}
	// A fresh registration starts with none.
	register(t, h, p, "", nil)
	if len(members(t, h, "b")) != 0 {
		t.Fatal("a fresh registration inherited names")
	}
}

// TestWatchStreams: a watch sends the initial set, then added and
// removed, and ends when the hub shuts down (before the listener drain,
// so Shutdown does not wait for it).
func TestWatchStreams(t *testing.T) {
	h := startHub(t, testConfig())
	p1, p2 := fakePeer(), fakePeer()
	register(t, h, p1, "", svc("w"))
	resp, err := http.Get(pub(h) + protocol.WatchServicePath("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != protocol.WatchContentType {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(resp.Body)
	next := func() protocol.WatchEvent {
		t.Helper()
		var ev protocol.WatchEvent
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("watch ended: %v", err)
			}
			if strings.HasPrefix(line, "data: ") {
				if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
					t.Fatal(err)
				}
				return ev
			}
		}
	}
	if ev := next(); ev.Type != protocol.WatchInitial || len(ev.Instances) != 1 || ev.Instances[0] != p1.InstanceID {
		t.Fatalf("initial: %+v", ev)
	}
	r2 := register(t, h, p2, "", svc("w"))
	if ev := next(); ev.Type != protocol.WatchAdded || ev.Instances[0] != p2.InstanceID {
		t.Fatalf("added: %+v", ev)
	}
	call(t, "DELETE", ctl(h)+protocol.InstancePath(p2.InstanceID), nil, r2.Credential)
	if ev := next(); ev.Type != protocol.WatchRemoved || ev.Instances[0] != p2.InstanceID {
		t.Fatalf("removed: %+v", ev)
	}
	h.dir.closeWatches() // the shutdown hook
	if _, err := rd.ReadString('\n'); err == nil {
		for {
			if _, err := rd.ReadString('\n'); err != nil {
				break
			}
		}
	}
}

// TestSlowWatcherIsCut: a watcher more than WatchBacklog changes behind
// is dropped and its stream ends; a watcher that keeps up stays.
func TestSlowWatcherIsCut(t *testing.T) {
	h, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	d := h.dir
	slow, _, _ := d.subscribe("x")
	for i := 0; i <= protocol.WatchBacklog; i++ {
		d.mu.Lock()
		id := ext.NewInstanceID()
		d.joinLocked("x", id)
		d.mu.Unlock()
	}
	select {
	case <-slow.cut:
	default:
		t.Fatalf("a watcher %d changes behind was not cut", protocol.WatchBacklog+1)
	}
	keeper, _, _ := d.subscribe("y")
	for i := 0; i < 3*protocol.WatchBacklog; i++ {
		d.mu.Lock()
		d.joinLocked("y", ext.NewInstanceID())
		d.mu.Unlock()
		<-keeper.ch
	}
	select {
	case <-keeper.cut:
		t.Fatal("a watcher that keeps up was cut")
	default:
	}
	d.unsubscribe("y", keeper)
	d.unsubscribe("x", slow)
}

// TestWatchKeepAlive: an idle watch stream over a real HTTP connection
// carries the keep-alive comment at the configured interval (injected
// short here), after the initial event and before any change.
func TestWatchKeepAlive(t *testing.T) {
	tm := defaultTiming()
	tm.keepAlive = 10 * time.Millisecond
	h := startHub(t, testConfig(), withTiming(tm))
	cl := &http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get(pub(h) + protocol.WatchServicePath("idle"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	sawInitial := false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before a keep-alive (initial seen: %v): %v", sawInitial, err)
		}
		if strings.HasPrefix(line, "event: "+string(protocol.WatchInitial)) {
			sawInitial = true
		}
		if line == ": keep-alive\n" {
			if !sawInitial {
				t.Fatal("a keep-alive came before the initial event")
			}
			break
		}
		if strings.HasPrefix(line, "event: ") && !sawInitial {
			t.Fatalf("unexpected first event %q", line)
		}
	}
	h.dir.closeWatches()
}
