package msgwire

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// CodeHeader and ReasonHeader are the keys, in an error Response's header
// map, of the failure's code (in decimal) and of the reason that names its
// sentinel. The reference ignores the map and reads the payload, the
// error's text, so a Rust caller sees the same failure without its code.
const (
	CodeHeader   = "velo-code"
	ReasonHeader = "velo-reason"
)

// DeadlineHeader is the request header that carries the caller's deadline
// (Go-defined; see docs/wire.md). A handler reads it through
// Context.Context, never in Context.Headers; a caller's own value for it
// is dropped.
const DeadlineHeader = "_velo_deadline"

// Header keys of transparent staging. The sender writes both on a staged
// request; the receiver takes both out before the handler runs, so a
// handler never sees them and never passes them on.
const (
	// StagedHandleHeader carries the handle of a staged payload, as the
	// decimal form of its 128 bits.
	StagedHandleHeader = "_rv"
	// StagedBudgetHeader carries what was left of the caller's deadline
	// when the request left, in whole milliseconds rounded up.
	StagedBudgetHeader = "_rv_budget_ms"
)

// ProofKey marks the address of a node that answers identity challenges.
// Its endpoint is the version of the proof protocol (1).
const ProofKey ext.TransportKey = "velo-conn-proof"

// ProofTimeout bounds how long a connection's requests wait for its peer's
// proof before they are refused.
const ProofTimeout = 5 * time.Second

// PeerShutdownGrace is how long what waits on a peer that shut down in
// order may still get its answer after the peer's connection ended: the
// answers travel on the peer's own connection to this node, which may
// trail the end of ours a little.
const PeerShutdownGrace = 50 * time.Millisecond

// SystemHandlerLabel is the handler label under which velo's own handlers
// (names starting with '_') are counted together, unless
// messenger.Config.SystemHandlerMetrics asks for one set of series per
// handler.
const SystemHandlerLabel = "_system"
