package wire

import (
	"encoding/hex"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// unhex reads hex with spaces between groups, as the goldens are written.
func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad golden %q: %v", s, err)
	}
	return b
}

// mustSlot is a SlotID from a test's own constants.
func mustSlot(t testing.TB, index uint32, gen uint8) SlotID {
	s, ok := NewSlotID(index, gen)
	if !ok {
		t.Fatalf("slot index %d does not fit", index)
	}
	return s
}
