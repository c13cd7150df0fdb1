package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/transport/tcp"
)

// testConfig serves on free loopback ports with short intervals.
func testConfig() Config {
	c := DefaultConfig()
	c.PublicAddr, c.ControlAddr = "127.0.0.1:0", "127.0.0.1:0"
	c.HeartbeatIntervalMS = 40
	c.LockTimeoutMS = 2000
	c.StepTimeoutMS = 2000
	c.ShutdownTimeoutMS = 2000
	return c
}

func withTiming(t httpTiming) Option { return Option{func(o *options) { o.timing = &t }} }

// startHub serves a hub and stops it at cleanup.
func startHub(t *testing.T, cfg Config, opts ...Option) *Hub {
	t.Helper()
	h, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return h
}

func veloTCP(t *testing.T) Option {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	return WithVelo(velo.WithTransport(tr))
}

// call sends one request and returns the status and body.
func call(t *testing.T, method, url string, body []byte, cred protocol.Credential) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set(protocol.CredentialHeader, string(cred))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func ctl(h *Hub) string { return "http://" + h.ControlAddr().String() }
func pub(h *Hub) string { return "http://" + h.PublicAddr().String() }

// wantCode checks an ErrorBody answer.
func wantCode(t *testing.T, what string, status int, body []byte, code protocol.ErrorCode, wantStatus int) {
	t.Helper()
	var eb protocol.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Code != code || status != wantStatus {
		t.Fatalf("%s: got %d %s, want %d with code %s", what, status, body, wantStatus, code)
	}
}

// fakePeer is a PeerInfo with an address that no transport dials.
func fakePeer() ext.PeerInfo {
	return ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
}

func regBody(t *testing.T, p ext.PeerInfo, exts map[string]any) []byte {
	t.Helper()
	req := map[string]any{"peer": p}
	if exts != nil {
		req["extensions"] = exts
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// register registers p and fails the test unless it succeeds.
func register(t *testing.T, h *Hub, p ext.PeerInfo, cred protocol.Credential, exts map[string]any) protocol.RegisterResponse {
	t.Helper()
	st, b := call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, exts), cred)
	if st != http.StatusOK {
		t.Fatalf("register: %d %s", st, b)
	}
	var r protocol.RegisterResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// registrant is a velo node that answers the hub's heartbeat with ok
// while ok is set.
type registrant struct {
	node *velo.Node
	ok   atomic.Bool
}

func startRegistrant(t *testing.T) *registrant {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	r := &registrant{node: n}
	r.ok.Store(true)
	err = n.Register(velo.UnaryHandler(protocol.HeartbeatHandler, func(*velo.Context) ([]byte, error) {
		return json.Marshal(protocol.HeartbeatAnswer{OK: r.ok.Load()})
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return r
}

// recorder is an extension that reports its hooks and fails on request.
type recorder struct {
	BaseExtension
	name        string
	mu          sync.Mutex
	removed     chan removedAt
	prepareErr  error
	prepareGate chan struct{} // Prepare waits for it when not nil
	entered     chan struct{} // hears each Prepare as it begins (buffered)
	commitPanic bool
	committed   map[ext.InstanceID]protocol.Epoch
	aborted     atomic.Int32
}

type removedAt struct {
	owner ext.InstanceID
	inc   store.Incarnation
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, removed: make(chan removedAt, 64), entered: make(chan struct{}, 64),
		committed: map[ext.InstanceID]protocol.Epoch{}}
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Prepare(ctx context.Context, reg *Registration) (Staged, error) {
	r.mu.Lock()
	gate, perr := r.prepareGate, r.prepareErr
	r.mu.Unlock()
	select {
	case r.entered <- struct{}{}:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if perr != nil {
		return nil, perr
	}
	return &recStage{r: r}, nil
}

func (r *recorder) OnRemoved(owner ext.InstanceID, inc store.Incarnation) {
	r.mu.Lock()
	delete(r.committed, owner)
	r.mu.Unlock()
	r.removed <- removedAt{owner, inc}
}

func (r *recorder) epochOf(owner ext.InstanceID) (protocol.Epoch, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.committed[owner]
	return e, ok
}

type recStage struct{ r *recorder }

func (s *recStage) Commit(reg *Registration) {
	s.r.mu.Lock()
	p := s.r.commitPanic
	s.r.committed[reg.Owner] = reg.Epoch
	s.r.mu.Unlock()
	if p {
		panic("recorder: commit fails on request")
	}
}

func (s *recStage) Abort() { s.r.aborted.Add(1) }

// waitRemoved waits for the recorder to hear owner removed.
func (r *recorder) waitRemoved(t *testing.T, owner ext.InstanceID) removedAt {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case x := <-r.removed:
			if x.owner == owner {
				return x
			}
		case <-timeout:
			t.Fatalf("no removal of %s", owner)
		}
	}
}

var errRefused = errors.New("recorder: refused")
