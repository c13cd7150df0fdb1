package messenger

import (
	"context"
	"strconv"
	"testing"
	"time"
)

type fakeStager struct {
	staged    []byte
	ttl       time.Duration
	discarded []string
}

func (f *fakeStager) Threshold() int { return 8 }
func (f *fakeStager) Stage(p []byte, ttl time.Duration) (string, error) {
	f.staged, f.ttl = append([]byte(nil), p...), ttl
	return "18446744073709551618", nil
}
func (f *fakeStager) Discard(h string)                                    { f.discarded = append(f.discarded, h) }
func (f *fakeStager) Fetch(context.Context, string, bool) ([]byte, error) { return nil, nil }
func (f *fakeStager) FetchTimeout() time.Duration                         { return 0 }

// TestStageRequestHeaders: a staged request carries the handle and the
// caller's remaining budget (rounded up to whole milliseconds) and the
// caller's other headers; a caller's own _rv keys never survive; a payload
// at the threshold is not staged.
func TestStageRequestHeaders(t *testing.T) {
	m := &Messenger{}
	fs := &fakeStager{}
	m.SetStager(fs)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	opts := []CallOption{WithHeaders(map[string]string{"trace": "t", StagedHandleHeader: "forged", StagedBudgetHeader: "1"})}
	hb, payload, handle, err := m.stageRequest(ctx, UnaryResponse, []byte("123456789"), nil, opts)
	if err != nil || payload != nil || handle == "" {
		t.Fatalf("not staged: %v %q %q", err, payload, handle)
	}
	h, err := DecodeHeaders(hb)
	if err != nil {
		t.Fatal(err)
	}
	if h[StagedHandleHeader] != "18446744073709551618" || h["trace"] != "t" || len(h) != 3 {
		t.Fatalf("headers %v", h)
	}
	ms, err := strconv.Atoi(h[StagedBudgetHeader])
	if err != nil || ms < 1400 || ms > 1500 {
		t.Fatalf("budget %q", h[StagedBudgetHeader])
	}
	if fs.ttl <= 0 || fs.ttl > 1500*time.Millisecond {
		t.Fatalf("ttl %v", fs.ttl)
	}
	// Fire-and-forget: no budget, no TTL.
	hb, _, _, _ = m.stageRequest(ctx, FireAndForget, []byte("123456789"), nil, opts)
	if h, _ := DecodeHeaders(hb); h[StagedBudgetHeader] != "" || fs.ttl != 0 {
		t.Fatalf("fire-and-forget staged with a budget: %v %v", h, fs.ttl)
	}
	// At the threshold: inline, headers untouched.
	hb0 := []byte{0x80}
	hb, payload, handle, _ = m.stageRequest(ctx, UnaryResponse, []byte("12345678"), hb0, opts)
	if handle != "" || string(payload) != "12345678" || &hb[0] != &hb0[0] {
		t.Fatal("a payload at the threshold was staged")
	}
	// The receiver's side takes both keys out and reads the budget.
	wire, _ := EncodeHeaders(map[string]string{StagedHandleHeader: "5", StagedBudgetHeader: "250", "k": "v"})
	got, budget, rest, ok := stagedHandle(wire)
	if !ok || got != "5" || budget != 250*time.Millisecond || len(rest) != 1 || rest["k"] != "v" {
		t.Fatalf("stagedHandle: %q %v %v %v", got, budget, rest, ok)
	}
	if _, _, _, ok := stagedHandle(nil); ok {
		t.Fatal("no headers read as staged")
	}
	// An eager call's _rv keys are dropped by prepare.
	hb, err = m.prepare("h", opts)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := DecodeHeaders(hb); len(h) != 1 || h["trace"] != "t" {
		t.Fatalf("eager headers %v", h)
	}
}

// FuzzStagedHandle: any header block is read without a panic.
func FuzzStagedHandle(f *testing.F) {
	wire, _ := EncodeHeaders(map[string]string{StagedHandleHeader: "5", StagedBudgetHeader: "250"})
	f.Add(wire)
	f.Add([]byte{0x81, 0xa3, '_', 'r', 'v', 0xa1})
	f.Fuzz(func(t *testing.T, b []byte) {
		stagedHandle(b)
	})
}
