package msgrx

import (
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/messenger"
)

var (
	handshakes       = typed[func(*messenger.Messenger) int64]("Handshakes", hook.Fns.Handshakes)
	unmatchedReplies = typed[func(*messenger.Messenger) int64]("UnmatchedReplies", hook.Fns.UnmatchedReplies)
)

// Handshakes is how many handshakes the node started (for tests and reports).
func Handshakes(m *messenger.Messenger) int64 { return handshakes(m) }

// UnmatchedReplies is how many replies matched no waiting call: late ones
// (the caller gave up), duplicates, and forged ones.
func UnmatchedReplies(m *messenger.Messenger) int64 { return unmatchedReplies(m) }
