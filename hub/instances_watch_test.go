package hub

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// nextSnapshot reads the next instances event of a watch.
func nextSnapshot(t *testing.T, rd *bufio.Reader) protocol.InstancesSnapshot {
	t.Helper()
	event := ""
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("watch ended: %v", err)
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimSpace(line[7:])
		case strings.HasPrefix(line, "data: "):
			if event != protocol.WatchInstancesEvent {
				t.Fatalf("event %q", event)
			}
			var s protocol.InstancesSnapshot
			if err := json.Unmarshal([]byte(line[6:]), &s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
}

func hasInstance(s protocol.InstancesSnapshot, id ext.InstanceID) bool {
	return slices.ContainsFunc(s.Instances, func(v protocol.InstanceView) bool { return v.Peer.InstanceID == id })
}

// waitSnapshot reads snapshots until ok says yes; each change sends one,
// so the loop ends unless the change never shows.
func waitSnapshot(t *testing.T, rd *bufio.Reader, ok func(protocol.InstancesSnapshot) bool) protocol.InstancesSnapshot {
	t.Helper()
	for {
		if s := nextSnapshot(t, rd); ok(s) {
			return s
		}
	}
}

// TestWatchInstances: the instance watch opens with a snapshot, shows a
// registration with its address and its services, a service PUT, and an
// unregistration, each without asking again; Shutdown ends the stream.
func TestWatchInstances(t *testing.T) {
	h := startHub(t, testConfig())
	resp, err := http.Get(pub(h) + protocol.PathWatchInstances)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != protocol.WatchContentType {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(resp.Body)
	if s := nextSnapshot(t, rd); len(s.Instances) != 0 || s.HubID != h.ID() {
		t.Fatalf("first snapshot %+v", s)
	}
	p := fakePeer()
	r := register(t, h, p, "", svc("llm"))
	s := waitSnapshot(t, rd, func(s protocol.InstancesSnapshot) bool { return hasInstance(s, p.InstanceID) && len(s.Services) == 1 })
	v := s.Instances[0]
	if v.Epoch != r.Epoch || v.Address["tcp"] != "127.0.0.1:1" || v.LastSeenUnixMillis == 0 {
		t.Fatalf("instance view %+v", v)
	}
	if s.Services[0].Name != "llm" || s.Services[0].Instances[0] != p.InstanceID {
		t.Fatalf("services %+v", s.Services)
	}
	if st, b := call(t, "PUT", ctl(h)+protocol.ServiceInstancePath("embed", p.InstanceID), nil, r.Credential); st != http.StatusNoContent {
		t.Fatalf("put: %d %s", st, b)
	}
	waitSnapshot(t, rd, func(s protocol.InstancesSnapshot) bool { return len(s.Services) == 2 })
	if st, b := call(t, "DELETE", ctl(h)+protocol.InstancePath(p.InstanceID), nil, r.Credential); st != http.StatusNoContent {
		t.Fatalf("unregister: %d %s", st, b)
	}
	waitSnapshot(t, rd, func(s protocol.InstancesSnapshot) bool {
		return !hasInstance(s, p.InstanceID) && len(s.Services) == 0
	})
}

// TestUIPage: GET / on the public listener is the page, which follows
// the instance watch; the control listener has no page.
func TestUIPage(t *testing.T) {
	h := startHub(t, testConfig())
	resp, err := http.Get(pub(h) + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(b), protocol.PathWatchInstances) {
		t.Fatalf("page: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	st, body := call(t, "GET", ctl(h)+"/", nil, "")
	wantCode(t, "control GET /", st, body, protocol.CodeNotFound, 404)
	st, body = call(t, "GET", pub(h)+"/nope", nil, "")
	wantCode(t, "public GET /nope", st, body, protocol.CodeNotFound, 404)
}
