package streamwire

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
		if t == nil {
			panic("bad golden " + s)
		}
		t.Fatalf("bad golden %q: %v", s, err)
	}
	return b
}
