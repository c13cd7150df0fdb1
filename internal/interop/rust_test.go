// Package interop_test runs a Go node against a node of the Rust reference
// implementation, over TCP on loopback, in both directions. It needs a
// peer program built against the reference (see docs/interop.md) and runs
// only when VELO_RUST_PEER names it; CI has no Rust toolchain, so there it
// is skipped, and the golden vectors of each package hold the formats.
package interop_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// rustPeer drives the peer program: one JSON object per line each way.
type rustPeer struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan map[string]any
	mu    sync.Mutex
}

func startRust(t *testing.T, path string, args ...string) *rustPeer {
	cmd := exec.Command(path, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rustPeer{t: t, cmd: cmd, in: in, lines: make(chan map[string]any, 16)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("rust peer wrote %q: %v", sc.Text(), err)
				continue
			}
			m["raw"] = sc.Text()
			p.lines <- m
		}
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rust peer exited: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("rust peer did not exit")
		}
	})
	return p
}

func (p *rustPeer) send(v any) {
	p.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rustPeer) next(what string) map[string]any {
	p.t.Helper()
	select {
	case m, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("rust peer closed its output waiting for %s", what)
		}
		return m
	case <-time.After(20 * time.Second):
		p.t.Fatalf("no line from the rust peer for %s", what)
	}
	return nil
}

// do runs one command and returns its result line.
func (p *rustPeer) do(cmd map[string]any) (ok bool, detail string) {
	p.t.Helper()
	p.send(cmd)
	m := p.next(fmt.Sprint(cmd))
	if m["cmd"] != cmd["cmd"] {
		p.t.Fatalf("sent %v, got %s", cmd, m["raw"])
	}
	ok, _ = m["ok"].(bool)
	detail, _ = m["detail"].(string)
	return ok, detail
}

func handleDecimal(h events.Handle) string {
	v := new(big.Int).Lsh(new(big.Int).SetUint64(h.Hi), 64)
	return v.Or(v, new(big.Int).SetUint64(h.Lo)).String()
}

func parseHandle(t *testing.T, s string) events.Handle {
	v, ok := new(big.Int).SetString(strings.TrimSpace(s), 10)
	if !ok {
		t.Fatalf("handle %q", s)
	}
	lo := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0)))
	return events.Handle{Hi: new(big.Int).Rsh(v, 64).Uint64(), Lo: lo.Uint64()}
}

type addReq struct {
	A int64 `json:"a"`
	B int64 `json:"b"`
}
type addResp struct {
	Sum int64 `json:"sum"`
}

func TestAgainstRustReference(t *testing.T) {
	path := os.Getenv("VELO_RUST_PEER")
	if path == "" {
		t.Skip("VELO_RUST_PEER is not set (see docs/interop.md)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rs := startRust(t, path)

	var rinfo ext.PeerInfo
	first := rs.next("the peer's info")
	raw, _ := json.Marshal(first["peer_info"])
	if err := json.Unmarshal(raw, &rinfo); err != nil {
		t.Fatalf("decode the rust peer info %s: %v", raw, err)
	}
	t.Logf("rust node %s, address entries %v", rinfo.InstanceID, keys(rinfo.Address))

	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	g, err := velo.New(ctx, velo.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownWithin(g, 2*time.Second)
	var fired atomic.Int64
	for _, h := range []velo.Handler{
		velo.UnaryHandler("go_echo", func(c *velo.Context) ([]byte, error) { return append([]byte(nil), c.Payload...), nil }),
		velo.UnaryHandler("go_fail", func(*velo.Context) ([]byte, error) { return nil, errors.New("go_fail says no") }),
		velo.SyncHandler("go_sync", func(*velo.Context) error { return nil }),
		velo.SyncHandler("go_sync_fail", func(*velo.Context) error { return errors.New("go_sync_fail says no") }),
		velo.FireHandler("go_fire", func(*velo.Context) { fired.Add(1) }),
		velo.TypedUnaryHandler("go_add", func(_ *velo.Context, r addReq) (addResp, error) { return addResp{Sum: r.A + r.B}, nil }),
	} {
		if err := g.Register(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RegisterPeer(rinfo); err != nil {
		t.Fatalf("register the rust peer: %v", err)
	}
	rs.send(map[string]any{"peer_info": g.PeerInfo()})
	if m := rs.next("registration"); m["registered"] != true {
		t.Fatalf("the rust peer did not register the go node: %s", m["raw"])
	}
	rid := rinfo.InstanceID

	t.Run("go calls rust", func(t *testing.T) {
		resp, err := g.Unary(ctx, rid, "rs_echo", []byte("hello rust"))
		check(t, "unary", err == nil && string(resp) == "hello rust", resp, err)
		_, err = g.Unary(ctx, rid, "rs_fail", nil)
		var re *velo.RemoteError
		check(t, "unary error", errors.As(err, &re) && strings.Contains(re.Message, "rs_fail says no"), nil, err)
		// The reference sends no code: its errors read as Unknown.
		check(t, "unary error code", velo.ErrorCode(err) == velo.Unknown, nil, err)
		check(t, "sync", g.Sync(ctx, rid, "rs_sync", []byte("x")) == nil, nil, nil)
		err = g.Sync(ctx, rid, "rs_sync_fail", nil)
		check(t, "sync error", errors.As(err, &re) && strings.Contains(re.Message, "rs_sync_fail says no"), nil, err)
		for range 3 {
			if err := g.Send(ctx, rid, "rs_fire", []byte("f")); err != nil {
				t.Errorf("fire: %v", err)
			}
		}
		// The count is read with a unary call on the same connection, so
		// the fires went first; poll in case the handler runs them later.
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, err := g.Unary(ctx, rid, "rs_fired", nil)
			if err == nil && string(resp) == "3" || time.Now().After(deadline) {
				check(t, "fire-and-forget", err == nil && string(resp) == "3", resp, err)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sum, err := velo.TypedUnary[addResp](ctx, g, rid, "rs_add", addReq{A: 40, B: 2})
		check(t, "typed unary", err == nil && sum.Sum == 42, sum, err)
		_, err = g.Unary(ctx, rid, "no_such_handler", nil)
		check(t, "unknown handler", errors.As(err, &re), nil, err)
		names, err := g.RemoteHandlers(ctx, rid)
		check(t, "list handlers", err == nil && contains(names, "rs_echo"), names, err)
	})

	t.Run("go waits on and triggers rust events", func(t *testing.T) {
		resp, err := g.Unary(ctx, rid, "rs_event_new", nil)
		if err != nil {
			t.Fatal(err)
		}
		h := parseHandle(t, string(resp))
		waited := make(chan error, 1)
		// The wait may subscribe before or after the trigger: both must work.
		go func() { waited <- g.Events.Wait(ctx, h) }()
		if _, err := g.Unary(ctx, rid, "rs_event_trigger", []byte(handleDecimal(h))); err != nil {
			t.Fatal(err)
		}
		check(t, "remote wait", <-waited == nil, nil, nil)

		resp, _ = g.Unary(ctx, rid, "rs_event_new", nil)
		h = parseHandle(t, string(resp))
		go func() { waited <- g.Events.Wait(ctx, h) }()
		if _, err := g.Unary(ctx, rid, "rs_event_poison", []byte(handleDecimal(h))); err != nil {
			t.Fatal(err)
		}
		err = <-waited
		var pe *events.PoisonedError
		// A subscription that reaches a Rust owner after the poison gets
		// "event was poisoned", not the reason: the reference drops it.
		check(t, "remote wait on a poisoned event", errors.As(err, &pe) &&
			(strings.Contains(pe.Reason, "rs poisoned") || pe.Reason == "event was poisoned"), nil, err)

		resp, _ = g.Unary(ctx, rid, "rs_event_new", nil)
		h = parseHandle(t, string(resp))
		err = g.Events.Trigger(ctx, h)
		check(t, "remote trigger request", err == nil, nil, err)
		check(t, "wait after remote trigger", g.Events.Wait(ctx, h) == nil, nil, nil)

		resp, _ = g.Unary(ctx, rid, "rs_event_new", nil)
		h = parseHandle(t, string(resp))
		err = g.Events.Poison(ctx, h, "go poisoned it")
		check(t, "remote poison request", err == nil, nil, err)
	})

	t.Run("rust calls go", func(t *testing.T) {
		ok, d := rs.do(map[string]any{"cmd": "unary", "handler": "go_echo", "payload": "hello go"})
		check(t, "unary", ok && d == "hello go", d, nil)
		ok, d = rs.do(map[string]any{"cmd": "unary", "handler": "go_fail", "payload": ""})
		check(t, "unary error", !ok && strings.Contains(d, "go_fail says no"), d, nil)
		ok, d = rs.do(map[string]any{"cmd": "sync", "handler": "go_sync", "payload": "x"})
		check(t, "sync", ok, d, nil)
		ok, d = rs.do(map[string]any{"cmd": "sync", "handler": "go_sync_fail", "payload": ""})
		check(t, "sync error", !ok && strings.Contains(d, "go_sync_fail says no"), d, nil)
		before := fired.Load()
		ok, d = rs.do(map[string]any{"cmd": "fire", "handler": "go_fire", "payload": "f"})
		check(t, "fire", ok, d, nil)
		deadline := time.Now().Add(5 * time.Second)
		for fired.Load() == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		check(t, "fire reached the handler", fired.Load() == before+1, fired.Load(), nil)
		ok, d = rs.do(map[string]any{"cmd": "typed_add", "handler": "go_add", "a": 40, "b": 2})
		check(t, "typed unary", ok && d == "42", d, nil)
		ok, d = rs.do(map[string]any{"cmd": "unary", "handler": "no_such_handler", "payload": ""})
		check(t, "unknown handler", !ok, d, nil)
		ok, d = rs.do(map[string]any{"cmd": "list_handlers"})
		check(t, "list handlers", ok && strings.Contains(d, "go_echo"), d, nil)
	})

	t.Run("rust waits on and triggers go events", func(t *testing.T) {
		e, err := g.Events.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		rs.send(map[string]any{"cmd": "wait_event", "handle": handleDecimal(e.Handle())})
		waitRecorded(t, g, 1)
		if err := e.Trigger(); err != nil {
			t.Fatal(err)
		}
		m := rs.next("the rust wait")
		check(t, "remote wait", m["cmd"] == "wait_event" && m["ok"] == true, m["raw"], nil)

		p, _ := g.Events.NewEvent()
		rs.send(map[string]any{"cmd": "wait_event", "handle": handleDecimal(p.Handle())})
		waitRecorded(t, g, 2)
		p.Poison("go poisoned")
		m = rs.next("the rust wait on a poisoned event")
		d, _ := m["detail"].(string)
		check(t, "remote wait on a poisoned event", m["ok"] == false && strings.Contains(d, "go poisoned"), m["raw"], nil)

		e, _ = g.Events.NewEvent()
		local := make(chan error, 1)
		go func() { local <- g.Events.Wait(ctx, e.Handle()) }()
		ok, d := rs.do(map[string]any{"cmd": "trigger_event", "handle": handleDecimal(e.Handle())})
		check(t, "remote trigger request", ok, d, nil)
		check(t, "local waiter woke", <-local == nil, nil, nil)

		e, _ = g.Events.NewEvent()
		ok, d = rs.do(map[string]any{"cmd": "poison_event", "handle": handleDecimal(e.Handle()), "reason": "rust poisoned it"})
		check(t, "remote poison request", ok, d, nil)
		err = g.Events.Wait(ctx, e.Handle())
		var pe *events.PoisonedError
		check(t, "poison reached the owner", errors.As(err, &pe) && pe.Reason == "rust poisoned it", nil, err)
	})

	streamChecks(ctx, t, g, rs, rinfo)
	typedStreamChecks(ctx, t, g, rs)
	muxPeerChecks(ctx, t, g, path)

	t.Run("a draining go node refuses rust's calls at once", func(t *testing.T) {
		g.BeginDrain()
		start := time.Now()
		ok, d := rs.do(map[string]any{"cmd": "unary", "handler": "go_echo", "payload": "late"})
		check(t, "drain echo", !ok && strings.Contains(d, "shutting down"), d, nil)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("the refusal took %v: the rust caller waited for its timeout", took)
		}
	})
}

// waitRecorded waits until the go node recorded n remote subscribers.
func waitRecorded(t *testing.T, g *velo.Node, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.Events.SubscribersRecorded() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the rust subscription never reached the go owner (%d recorded)", g.Events.SubscribersRecorded())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func check(t *testing.T, what string, ok bool, got any, err error) {
	t.Helper()
	if ok {
		t.Logf("ok   %s", what)
		return
	}
	t.Errorf("FAIL %s: got %v, err %v", what, got, err)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func keys(a ext.WorkerAddress) []string {
	var out []string
	for k := range a {
		out = append(out, string(k)+"="+strconv.Itoa(len(a[k]))+"B")
	}
	return out
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}
