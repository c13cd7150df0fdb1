package rendezvous_test

import (
	"errors"
	"testing"

	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/rendezvous"
)

// TestReferenceRefusalsMatchErrNotFound: a Rust owner answers with text
// and no code; its "not found" answers still match ErrNotFound, and other
// code-less errors match nothing of ours.
func TestReferenceRefusalsMatchErrNotFound(t *testing.T) {
	for _, msg := range []string{"rendezvous handle not found: 42", "chunk not found", "_rv_ref: handle not found"} {
		err := rendezvous.FromRemote(&msgerr.RemoteError{Handler: "_rv_acquire", Message: msg})
		if !errors.Is(err, rendezvous.ErrNotFound) {
			t.Fatalf("%q: %v does not match ErrNotFound", msg, err)
		}
	}
	err := rendezvous.FromRemote(&msgerr.RemoteError{Handler: "_rv_pull", Message: "disk on fire"})
	if errors.Is(err, rendezvous.ErrNotFound) || errors.Is(err, rendezvous.ErrNotHolder) {
		t.Fatalf("an unrelated remote error matched a sentinel: %v", err)
	}
}
