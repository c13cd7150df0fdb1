package hostile

import (
	"encoding/hex"
	"math"
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/muxwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The stranger's OpenSlot is the 91 bytes, laid out as docs/wire.md
// and docs/mux-wire.md say: a preamble, a fire-and-forget header for
// _stream_batch whose response id names the claimed worker, and a batch
// of one OpenSlot record.
func TestStrangerOpenSlotFrame(t *testing.T) {
	slot, _ := muxwire.NewSlotID(0, 0)
	batch := Batch(0, 1, 1, func(e *muxwire.Encoder) error { return e.OpenSlot(slot, 0, 0xabc, 0xdef) })
	f := BatchFrame(ext.WorkerID(0x0102030405060708), 0, batch, nil)
	if len(f) != 91 {
		t.Fatalf("the frame has %d bytes, want 91", len(f))
	}
	want := "000100" + "00000023" + "0000002d" + // preamble: version 1, Message, header 35, payload 45
		"0100" + "0807060504030201" + "0000000000000000" + // schema, fire and forget, response id (LE)
		"0d00" + hex.EncodeToString([]byte("_stream_batch")) + "0000" + // handler, no headers
		"02000001" + "0000000000000001" + "00000001" + // batch: v2, lane 0, 1 record, epoch 1, seq 1
		"01" + "00000000" + "00000000" + "00000010" + "0000000000000abc" + "0000000000000def" // OpenSlot
	if got := hex.EncodeToString(f); got != want {
		t.Fatalf("frame\n got %s\nwant %s", got, want)
	}
	p, err := frame.ParsePreamble(f[:frame.PreambleLen], frame.DefaultMaxFrame)
	if err != nil || p.FrameLen() != len(f) {
		t.Fatalf("the preamble reads as %+v, %v", p, err)
	}
}

// A frame with headers carries them as the messenger encodes them.
func TestFrameHeaders(t *testing.T) {
	h := map[string]string{msgwire.StagedHandleHeader: U128(1, 2)}
	f := Frame(msgwire.UnaryResponse, 7, 9, "work", h, []byte("x"))
	enc, err := msgwire.EncodeHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	hdrLen := 1 + 1 + 16 + 2 + len("work") + 2 + len(enc)
	if len(f) != frame.PreambleLen+hdrLen+1 || string(f[frame.PreambleLen+hdrLen-len(enc):frame.PreambleLen+hdrLen]) != string(enc) {
		t.Fatalf("headers not where the header layout puts them: % x", f)
	}
	if U128(1, 2) != "18446744073709551618" || U128(math.MaxUint64, math.MaxUint64) != "340282366920938463463374607431768211455" {
		t.Fatal("U128 is not the decimal of hi<<64|lo")
	}
}

// /proc/net/tcp writes 127.0.0.1:8080 as 0100007F:1F90.
func TestProcAddr(t *testing.T) {
	got, err := procAddr("127.0.0.1:8080")
	if err != nil || got != "0100007F:1F90" {
		t.Fatalf("procAddr = %q, %v", got, err)
	}
}

// Counters that name a refusal are told from the ones an attack moves on
// its victim, and from the ordinary ones (fire_and_forget is no forgery).
func TestClassify(t *testing.T) {
	before := map[string]float64{`velo_streaming_mux_records_dropped_total{reason="stale_epoch"}`: 1}
	after := map[string]float64{
		`velo_streaming_mux_records_dropped_total{reason="stale_epoch"}`:                                                   4,
		`velo_messenger_handler_requests_total{handler="_stream_batch",outcome="success",response_type="fire_and_forget"}`: 9,
		`velo_rendezvous_operations_total{operation="pull",outcome="error"}`:                                               2,
		`velo_streaming_mux_epoch_deaths_total`:                                                                            5,
		`stats:mux.ProtocolErrors`:                                                                                         1,
	}
	ref, sym := classify(before, after)
	if len(ref) != 3 || ref[`velo_streaming_mux_records_dropped_total{reason="stale_epoch"}`] != 3 || ref["stats:mux.ProtocolErrors"] != 1 {
		t.Fatalf("refusals %v", ref)
	}
	if len(sym) != 1 || sym["velo_streaming_mux_epoch_deaths_total"] != 5 {
		t.Fatalf("symptoms %v", sym)
	}
}
