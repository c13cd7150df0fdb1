package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// Stream checks against the Rust peer. Items are MessagePack binaries:
// []byte on the Go side, serde_bytes::ByteBuf on the Rust side. The peer's
// anchors log what they read ("item:X", "finalized", "detached",
// "dropped", "end" when the stream closed); its producer jobs report what
// they did (see rustpeer/src/streams.rs).

func anchorDecimal(h wire.AnchorHandle) string {
	v := new(big.Int).Lsh(new(big.Int).SetUint64(h.Hi), 64)
	return v.Or(v, new(big.Int).SetUint64(h.Lo)).String()
}

func parseAnchor(t *testing.T, s string) wire.AnchorHandle {
	t.Helper()
	e := parseHandle(t, s)
	return wire.AnchorHandle{Hi: e.Hi, Lo: e.Lo}
}

// rustAnchor makes an anchor on the Rust peer and returns its handle.
func rustAnchor(t *testing.T, rs *rustPeer, id string, extra map[string]any) wire.AnchorHandle {
	t.Helper()
	cmd := map[string]any{"cmd": "anchor_new", "id": id}
	for k, v := range extra {
		cmd[k] = v
	}
	ok, d := rs.do(cmd)
	if !ok {
		t.Fatalf("anchor_new: %s", d)
	}
	return parseAnchor(t, d)
}

// rustLog waits until the peer's anchor id logged n entries or ended.
func rustLog(t *testing.T, rs *rustPeer, id string, n int) []string {
	t.Helper()
	ok, d := rs.do(map[string]any{"cmd": "anchor_wait", "id": id, "n": n})
	if !ok {
		t.Fatalf("anchor_wait: %s", d)
	}
	var out []string
	if err := json.Unmarshal([]byte(d), &out); err != nil {
		t.Fatalf("anchor_wait %q: %v", d, err)
	}
	return out
}

func items(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("item:%s%d", prefix, i))
	}
	return out
}

func sendN(ctx context.Context, t *testing.T, s *streaming.Sender[[]byte], prefix string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := s.Send(ctx, []byte(fmt.Sprintf("%s%d", prefix, i))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

func sameLog(got []string, want ...[]string) bool {
	var w []string
	for _, x := range want {
		w = append(w, x...)
	}
	return strings.Join(got, "|") == strings.Join(w, "|")
}

func readN(ctx context.Context, t *testing.T, a *streaming.Anchor[[]byte], prefix string, n int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range n {
		v, err := a.Next(ctx)
		if err != nil || string(v) != fmt.Sprintf("%s%d", prefix, i) {
			t.Errorf("item %d: got %q, %v", i, v, err)
			return false
		}
	}
	return true
}

func streamChecks(ctx context.Context, t *testing.T, g *velo.Node, rs *rustPeer, rinfo ext.PeerInfo) {
	t.Run("go producer to rust anchor", func(t *testing.T) {
		h := rustAnchor(t, rs, "a1", nil)
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		check(t, "negotiated tcp-stream", s.NegotiatedTransport() == "tcp-stream", s.NegotiatedTransport(), nil)
		sendN(ctx, t, s, "go-", 0, 5)
		if err := s.Finalize(); err != nil {
			t.Fatal(err)
		}
		got := rustLog(t, rs, "a1", 100)
		check(t, "items in order, then finalized", sameLog(got, items("go-", 0, 5), []string{"finalized", "end"}), got, nil)

		h = rustAnchor(t, rs, "a2", nil)
		s, err = streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		sendN(ctx, t, s, "go-", 0, 2)
		s.Close()
		got = rustLog(t, rs, "a2", 100)
		check(t, "close is SenderDropped", sameLog(got, items("go-", 0, 2), []string{"dropped", "end"}), got, nil)

		h = rustAnchor(t, rs, "a3", nil)
		s, err = streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		sendN(ctx, t, s, "go-", 0, 2)
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		got = rustLog(t, rs, "a3", 3)
		check(t, "detach", sameLog(got, items("go-", 0, 2), []string{"detached"}), got, nil)
		s, err = streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("re-attach: %v", err)
		}
		sendN(ctx, t, s, "go-", 2, 4)
		if err := s.Finalize(); err != nil {
			t.Fatal(err)
		}
		got = rustLog(t, rs, "a3", 100)
		check(t, "re-attach after detach", sameLog(got, items("go-", 0, 2), []string{"detached"}, items("go-", 2, 4), []string{"finalized", "end"}), got, nil)
	})

	t.Run("rust producer to go anchor", func(t *testing.T) {
		a, err := streaming.CreateAnchor[[]byte](g.Streams)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ok, d := rs.do(map[string]any{"cmd": "produce", "job": "p1", "handle": anchorDecimal(a.Handle()), "n": 5, "prefix": "rs-", "end": "finalize"})
		if !ok {
			t.Fatal(d)
		}
		good := readN(ctx, t, a, "rs-", 5)
		_, err = a.Next(ctx)
		check(t, "items in order, then io.EOF", good && err == io.EOF, nil, err)
		ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "p1"})
		check(t, "rust sender negotiated tcp-stream and finalized", ok && strings.Contains(d, "transport=tcp-stream") && strings.HasSuffix(d, "finalized"), d, nil)

		b, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer b.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "p2", "handle": anchorDecimal(b.Handle()), "n": 2, "prefix": "rs-", "end": "drop"})
		good = readN(ctx, t, b, "rs-", 2)
		_, err = b.Next(ctx)
		check(t, "a dropped rust sender is ErrSenderDropped", good && errors.Is(err, streaming.ErrSenderDropped), nil, err)
		ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "p2"})
		check(t, "drop job", ok, d, nil)

		c, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer c.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "p3", "handle": anchorDecimal(c.Handle()), "n": 2, "prefix": "rs-", "end": "detach"})
		good = readN(ctx, t, c, "rs-", 2)
		ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "p3"})
		check(t, "rust detach", good && ok, d, nil)
		// The Detached frame frees the anchor when the Go reader takes it
		// off the connection, which may be after the Rust job returned:
		// an attach in between is refused as already attached (the
		// reference's anchors behave the same way), so retry.
		for range 50 {
			rs.do(map[string]any{"cmd": "produce", "job": "p4", "handle": anchorDecimal(c.Handle()), "n": 2, "prefix": "rs-", "end": "finalize"})
			time.Sleep(20 * time.Millisecond)
			ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "p4"})
			if ok || !strings.Contains(d, "already attached") {
				break
			}
		}
		good = readN(ctx, t, c, "rs-", 2)
		_, err = c.Next(ctx)
		check(t, "rust re-attach after detach", good && ok && err == io.EOF, d, err)
	})

	t.Run("cancel across", func(t *testing.T) {
		a, err := streaming.CreateAnchor[[]byte](g.Streams)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "c1", "handle": anchorDecimal(a.Handle()), "n": 2, "prefix": "rs-", "end": "await_cancel"})
		readN(ctx, t, a, "rs-", 2)
		a.Controller().Cancel()
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "c1"})
		check(t, "go consumer's cancel fires the rust sender's token", ok && strings.Contains(d, "cancel_token_fired=true"), d, nil)
		check(t, "and the rust send after it fails", ok && strings.Contains(d, "send_after=err"), d, nil)

		h := rustAnchor(t, rs, "a4", nil)
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer s.Close()
		sendN(ctx, t, s, "go-", 0, 1)
		rustLog(t, rs, "a4", 1)
		if ok, d := rs.do(map[string]any{"cmd": "anchor_cancel", "id": "a4"}); !ok {
			t.Fatal(d)
		}
		select {
		case <-s.Cancelled():
			check(t, "rust consumer's cancel closes Cancelled()", true, nil, nil)
		case <-time.After(5 * time.Second):
			check(t, "rust consumer's cancel closes Cancelled()", false, nil, nil)
		}
		err = s.Send(ctx, []byte("late"))
		check(t, "a send after it is ErrCancelled", errors.Is(err, streaming.ErrCancelled), nil, err)
	})

	t.Run("idle go producer and the rust heartbeat window", func(t *testing.T) {
		h := rustAnchor(t, rs, "hb1", map[string]any{"hb_ms": 200})
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		sendN(ctx, t, s, "go-", 0, 1)
		time.Sleep(1500 * time.Millisecond) // over seven windows of 200 ms
		sendN(ctx, t, s, "go-", 1, 2)
		s.Finalize()
		got := rustLog(t, rs, "hb1", 100)
		check(t, "an idle stream is not dropped", sameLog(got, items("go-", 0, 2), []string{"finalized", "end"}), got, nil)

		h = rustAnchor(t, rs, "hb2", map[string]any{"hb_ms": 200, "mpsc": true})
		ms, err := streaming.AttachMPSCAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("mpsc attach: %v", err)
		}
		ms.Send(ctx, []byte("go-0"))
		time.Sleep(1500 * time.Millisecond)
		ms.Send(ctx, []byte("go-1"))
		ms.Detach()
		got = rustLog(t, rs, "hb2", 3)
		check(t, "an idle mpsc producer is not dropped", len(got) == 3 && strings.HasSuffix(got[0], ":item:go-0") &&
			strings.HasSuffix(got[1], ":item:go-1") && strings.HasSuffix(got[2], ":detached"), got, nil)
	})

	t.Run("mpsc", func(t *testing.T) {
		h := rustAnchor(t, rs, "m1", map[string]any{"mpsc": true})
		s1, err := streaming.AttachMPSCAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach 1: %v", err)
		}
		s2, err := streaming.AttachMPSCAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach 2: %v", err)
		}
		for i := range 3 {
			s1.Send(ctx, []byte(fmt.Sprintf("a%d", i)))
			s2.Send(ctx, []byte(fmt.Sprintf("b%d", i)))
		}
		s1.Detach()
		s2.Close()
		got := rustLog(t, rs, "m1", 8)
		t.Logf("rust mpsc anchor read %v", got)
		per := map[string][]string{}
		for _, e := range got {
			sid, rest, _ := strings.Cut(e, ":")
			per[sid] = append(per[sid], rest)
		}
		okA, okB := false, false
		for _, l := range per {
			j := strings.Join(l, "|")
			okA = okA || j == "item:a0|item:a1|item:a2|detached"
			okB = okB || j == "item:b0|item:b1|item:b2|dropped:"
		}
		check(t, "two go producers into a rust mpsc anchor", len(got) == 8 && okA && okB, got, nil)

		m, err := streaming.CreateMPSCAnchor[[]byte](g.Streams)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		for _, j := range []string{"x", "y"} {
			rs.do(map[string]any{"cmd": "produce", "job": "mp" + j, "mpsc": true, "handle": anchorDecimal(m.Handle()), "n": 3, "prefix": j, "end": "detach"})
		}
		seen := map[streaming.SenderID][]string{}
		for range 8 {
			f, err := m.Next(ctx)
			if err != nil {
				t.Fatalf("mpsc next: %v", err)
			}
			e := f.Kind.String()
			if f.Kind == streaming.MPSCItem {
				e = string(f.Item)
			}
			seen[f.Sender] = append(seen[f.Sender], e)
		}
		for _, j := range []string{"x", "y"} {
			ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "mp" + j})
			check(t, "rust mpsc job "+j, ok, d, nil)
		}
		var joined []string
		for _, l := range seen {
			joined = append(joined, strings.Join(l, "|"))
		}
		okX, okY := false, false
		for _, j := range joined {
			okX = okX || j == "x0|x1|x2|Detached"
			okY = okY || j == "y0|y1|y2|Detached"
		}
		check(t, "two rust producers into a go mpsc anchor", len(seen) == 2 && okX && okY, joined, nil)
	})
	t.Run("what a go anchor answers to rust offers", func(t *testing.T) {
		// A Rust node with its mux on offers messenger-mux-v1 and
		// tcp-stream; an older one offers nothing. The Go mux is v2, so
		// every one of these must be answered with tcp-stream, as the
		// reference answers an offer it shares no mux with.
		for _, keys := range [][]string{{"tcp-stream"}, {"messenger-mux-v1", "tcp-stream"}, {"messenger-mux-v1"}, {}, {"grpc-stream"}} {
			a, err := streaming.CreateAnchor[[]byte](g.Streams)
			if err != nil {
				t.Fatal(err)
			}
			ok, d := rs.do(map[string]any{"cmd": "raw_attach", "handle": anchorDecimal(a.Handle()), "keys": keys})
			check(t, fmt.Sprintf("offer %v", keys), ok && strings.Contains(d, `streaming_transport_key: TransportKey("tcp-stream")`) && strings.Contains(d, "initial_credit: 0"), d, nil)
			a.Close()
		}
	})
	t.Run("refusals from a rust anchor", func(t *testing.T) {
		h := rustAnchor(t, rs, "r1", nil)
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		_, err = streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		check(t, "a second attach is ErrAlreadyAttached", errors.Is(err, streaming.ErrAlreadyAttached), nil, err)
		s.Finalize()
		rustLog(t, rs, "r1", 100)
		_, err = streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		check(t, "an attach after the end is ErrAnchorNotFound", errors.Is(err, streaming.ErrAnchorNotFound), nil, err)
	})

	t.Run("renewal of a rust anchor", func(t *testing.T) {
		// _anchor_renew is the Go node's own: the reference has no such
		// handler, so renewing a Rust handle is an error, and a quick one.
		h := rustAnchor(t, rs, "rn1", nil)
		start := time.Now()
		err := g.Streams.RenewReservations(h)
		took := time.Since(start)
		t.Logf("RenewReservations(rust handle) = %v after %v", err, took)
		check(t, "renewing a rust anchor fails at once", err != nil && took < 2*time.Second, took, err)
		rs.do(map[string]any{"cmd": "anchor_cancel", "id": "rn1"})
	})

	t.Run("soft errors and large items", func(t *testing.T) {
		h := rustAnchor(t, rs, "e1", nil)
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		sendN(ctx, t, s, "go-", 0, 1)
		s.SendError(ctx, "go soft error")
		big := make([]byte, 1<<20)
		copy(big, "big-go-item")
		if err := s.Send(ctx, big); err != nil {
			t.Fatalf("send 1 MiB: %v", err)
		}
		s.Finalize()
		got := rustLog(t, rs, "e1", 100)
		check(t, "go soft error and 1 MiB item reach rust", sameLog(got, items("go-", 0, 1),
			[]string{"sender_error:go soft error", "item:big-go-item\x00\x00\x00\x00\x00...(1048576 bytes)", "finalized", "end"}), got, nil)

		a, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer a.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "e2", "handle": anchorDecimal(a.Handle()), "n": 2, "prefix": "rs-", "pad": 1 << 20, "soft_error": "rs soft error", "end": "finalize"})
		var lens []int
		for range 2 {
			v, err := a.Next(ctx)
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			lens = append(lens, len(v))
		}
		_, err = a.Next(ctx)
		var se *streaming.SenderError
		check(t, "rust soft error is a *SenderError", errors.As(err, &se) && se.Message == "rs soft error", nil, err)
		_, err = a.Next(ctx)
		check(t, "1 MiB rust items arrive whole, then io.EOF", err == io.EOF && lens[0] == 4+1<<20 && lens[1] == 4+1<<20, lens, err)
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "e2"})
		check(t, "large item job", ok, d, nil)
	})

	t.Run("a go stop request to a rust producer", func(t *testing.T) {
		// The reference has no _stream_stop: the request is dropped there,
		// and the stream goes on until the consumer cancels.
		a, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer a.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "s1", "handle": anchorDecimal(a.Handle()), "n": 2, "prefix": "rs-", "end": "await_cancel"})
		readN(ctx, t, a, "rs-", 2)
		a.Controller().RequestStop()
		time.Sleep(200 * time.Millisecond)
		a.Controller().Cancel()
		_, err := a.Next(ctx)
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "s1"})
		check(t, "the stream survives the stop, and the cancel after it arrives", errors.Is(err, streaming.ErrCancelled) && ok && strings.Contains(d, "cancel_token_fired=true"), d, err)
	})

	t.Run("mpsc cancel across", func(t *testing.T) {
		m, _ := streaming.CreateMPSCAnchor[[]byte](g.Streams)
		defer m.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "mc1", "mpsc": true, "handle": anchorDecimal(m.Handle()), "n": 1, "prefix": "z", "end": "await_cancel"})
		if f, err := m.Next(ctx); err != nil || f.Kind != streaming.MPSCItem {
			t.Fatalf("first frame %v, %v", f, err)
		}
		m.Controller().Cancel()
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "mc1"})
		check(t, "go mpsc consumer's cancel reaches the rust producer", ok && strings.Contains(d, "cancel_token_fired=true") && strings.Contains(d, "send_after=err"), d, nil)

		h := rustAnchor(t, rs, "mc2", map[string]any{"mpsc": true})
		s, err := streaming.AttachMPSCAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		defer s.Close()
		s.Send(ctx, []byte("q"))
		rustLog(t, rs, "mc2", 1)
		rs.do(map[string]any{"cmd": "anchor_cancel", "id": "mc2"})
		select {
		case <-s.Cancelled():
			check(t, "rust mpsc consumer's cancel closes Cancelled()", true, nil, nil)
		case <-time.After(5 * time.Second):
			check(t, "rust mpsc consumer's cancel closes Cancelled()", false, nil, nil)
		}
		err = s.Send(ctx, []byte("late"))
		check(t, "and a send after it is ErrCancelled", errors.Is(err, streaming.ErrCancelled), nil, err)
	})
	t.Run("a cancel before the rust producer attaches", func(t *testing.T) {
		a, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer a.Close()
		a.Controller().Cancel()
		rs.do(map[string]any{"cmd": "produce", "job": "cb", "handle": anchorDecimal(a.Handle()), "n": 1, "prefix": "rs-", "end": "await_cancel"})
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "cb"})
		t.Logf("rust producer attaching to a cancelled go anchor: ok=%v %s", ok, d)
		check(t, "the rust producer hears of the cancel", !ok || strings.Contains(d, "cancel_token_fired=true"), d, nil)
	})

	t.Run("idle rust producer and a short go heartbeat window", func(t *testing.T) {
		// A second Go node whose anchors ask for 200 ms heartbeats: three
		// silent windows would drop the stream.
		tr, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := messenger.New(ctx, messenger.Config{Transports: []ext.Transport{tr}})
		if err != nil {
			t.Fatal(err)
		}
		defer shutdownWithin(m2, 2*time.Second)
		sm2, err := streaming.NewNodeManager(m2, streaming.WithHeartbeatInterval(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer sm2.Close()
		if err := m2.RegisterPeer(rinfo); err != nil {
			t.Fatal(err)
		}
		if ok, d := rs.do(map[string]any{"cmd": "register_peer", "peer_info": m2.PeerInfo()}); !ok {
			t.Fatal(d)
		}
		a, _ := streaming.CreateAnchor[[]byte](sm2)
		defer a.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "hb2", "handle": anchorDecimal(a.Handle()), "n": 1, "prefix": "rs-", "idle_ms": 1500, "end": "finalize"})
		good := readN(ctx, t, a, "rs-", 1)
		_, err = a.Next(ctx)
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "hb2"})
		check(t, "an idle rust stream is not dropped", good && err == io.EOF && ok && streamx.WatchdogFirings(sm2) == 0, d, err)

		m, _ := streaming.CreateMPSCAnchor[[]byte](sm2)
		defer m.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "hb3", "mpsc": true, "handle": anchorDecimal(m.Handle()), "n": 1, "prefix": "rs-", "idle_ms": 1500, "end": "detach"})
		var seen []string
		for range 2 {
			f, err := m.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e := f.Kind.String()
			if f.Kind == streaming.MPSCItem {
				e = string(f.Item)
			}
			seen = append(seen, e)
		}
		ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "hb3"})
		check(t, "an idle rust mpsc producer is not dropped", ok && strings.Join(seen, "|") == "rs-0|Detached" && streamx.WatchdogFirings(sm2) == 0, []any{seen, d}, nil)
	})
}

// muxPeerChecks runs streams against a second Rust node with the
// reference's mux on (messenger-mux-v1 beside tcp-stream): the Go mux is
// v2, so both directions must settle on tcp-stream.
func muxPeerChecks(ctx context.Context, t *testing.T, g *velo.Node, path string) {
	t.Run("a rust node with its mux on", func(t *testing.T) {
		rs := startRust(t, path, "--mux")
		var rinfo ext.PeerInfo
		raw, _ := json.Marshal(rs.next("the peer's info")["peer_info"])
		if err := json.Unmarshal(raw, &rinfo); err != nil {
			t.Fatal(err)
		}
		if err := g.RegisterPeer(rinfo); err != nil {
			t.Fatal(err)
		}
		rs.send(map[string]any{"peer_info": g.PeerInfo()})
		if m := rs.next("registration"); m["registered"] != true {
			t.Fatalf("not registered: %s", m["raw"])
		}

		h := rustAnchor(t, rs, "x1", nil)
		s, err := streaming.AttachAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		check(t, "go producer negotiated tcp-stream with a mux-v1 node", s.NegotiatedTransport() == "tcp-stream", s.NegotiatedTransport(), nil)
		sendN(ctx, t, s, "go-", 0, 3)
		s.Finalize()
		got := rustLog(t, rs, "x1", 100)
		check(t, "items then finalized", sameLog(got, items("go-", 0, 3), []string{"finalized", "end"}), got, nil)

		a, _ := streaming.CreateAnchor[[]byte](g.Streams)
		defer a.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "x2", "handle": anchorDecimal(a.Handle()), "n": 3, "prefix": "rs-", "end": "finalize"})
		good := readN(ctx, t, a, "rs-", 3)
		_, err = a.Next(ctx)
		ok, d := rs.do(map[string]any{"cmd": "job_wait", "job": "x2"})
		check(t, "rust producer with mux-v1 offered gets tcp-stream from go", good && err == io.EOF && ok && strings.Contains(d, "transport=tcp-stream"), d, err)

		m, _ := streaming.CreateMPSCAnchor[[]byte](g.Streams)
		defer m.Close()
		rs.do(map[string]any{"cmd": "produce", "job": "x3", "mpsc": true, "handle": anchorDecimal(m.Handle()), "n": 2, "prefix": "m", "end": "detach"})
		var seen []string
		for range 3 {
			f, err := m.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e := f.Kind.String()
			if f.Kind == streaming.MPSCItem {
				e = string(f.Item)
			}
			seen = append(seen, e)
		}
		ok, d = rs.do(map[string]any{"cmd": "job_wait", "job": "x3"})
		check(t, "rust mpsc producer with mux-v1 offered", ok && strings.Join(seen, "|") == "m0|m1|Detached", []any{seen, d}, nil)

		h = rustAnchor(t, rs, "x4", map[string]any{"mpsc": true})
		ms, err := streaming.AttachMPSCAnchor[[]byte](ctx, g.Streams, h)
		if err != nil {
			t.Fatalf("mpsc attach: %v", err)
		}
		ms.Send(ctx, []byte("q0"))
		ms.Detach()
		got = rustLog(t, rs, "x4", 2)
		check(t, "go mpsc producer to a mux-v1 node", len(got) == 2 && strings.HasSuffix(got[0], ":item:q0") && strings.HasSuffix(got[1], ":detached"), got, nil)
	})
}
