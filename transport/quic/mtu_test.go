package quic_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
)

// A jumbo MaxMTU request is lowered (to 6550, then to quic-go's 1452) with
// a warning for each step, and 64 KiB frames then make 200 round trips in
// order: the reference lost whole GSO batches above 6550 and stalled on
// each loss for a probe timeout (about 9 s for these 200).
func TestJumboMTURequestLosesNoFrame(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	a := startQUIC(t, quic.WithMaxMTU(8952), quic.WithLogger(log))
	b := startQUIC(t, quic.WithMaxMTU(8952), quic.WithLogger(log))
	if err := a.tr.Register(b.info); err != nil {
		t.Fatal(err)
	}
	if err := b.tr.Register(a.info); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if !strings.Contains(out, "lowered to 6550") || !strings.Contains(out, "at most 1452") {
		t.Fatalf("no warning for MaxMTU 8952; log:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte{0xa5}, 64<<10)
	start := time.Now()
	for i := 0; i < 200; i++ {
		h := binary.BigEndian.AppendUint32(nil, uint32(i))
		if _, err := a.tr.Send(b.info.InstanceID, ext.Frame{Type: ext.Message, Header: h, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		m := pop(ctx, t, b, i, payload)
		if _, err := b.tr.Send(a.info.InstanceID, ext.Frame{Type: ext.Message, Header: m, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		pop(ctx, t, a, i, payload)
	}
	t.Logf("200 round trips of 64 KiB at MaxMTU 8952: %v", time.Since(start))
}

// pop takes the next message of s and checks it is frame i, whole; it
// returns a copy of its header.
func pop(ctx context.Context, t *testing.T, s *started, i int, payload []byte) []byte {
	t.Helper()
	m, err := s.adapter.Messages().Pop(ctx)
	if err != nil {
		t.Fatalf("round trip %d: %v", i, err)
	}
	defer m.Done()
	if got := binary.BigEndian.Uint32(m.Header); got != uint32(i) || !bytes.Equal(m.Payload, payload) {
		t.Fatalf("round trip %d: got seq %d with %d bytes", i, got, len(m.Payload))
	}
	return bytes.Clone(m.Header)
}

// A MaxMTU below quic-go's largest packet turns path MTU discovery off and
// still carries large frames; below QUIC's floor it is raised to 1200.
func TestSmallMTURequest(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	a := startQUIC(t, quic.WithMaxMTU(1000), quic.WithLogger(log))
	b := startQUIC(t, quic.WithMaxMTU(1300))
	if err := a.tr.Register(b.info); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if !strings.Contains(out, "raised to QUIC's minimum") {
		t.Fatalf("no warning for MaxMTU 1000; log:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte{0x3c}, 256<<10)
	for i := 0; i < 20; i++ {
		h := binary.BigEndian.AppendUint32(nil, uint32(i))
		if _, err := a.tr.Send(b.info.InstanceID, ext.Frame{Type: ext.Message, Header: h, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		pop(ctx, t, b, i, payload)
	}
}
