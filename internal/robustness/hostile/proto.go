package hostile

import (
	"encoding/json"

	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/rendezvous"
)

// The control channel between a case and its node processes: one JSON
// object per line. The case writes a command on the child's stdin; the
// child answers each with one reply of the same id on stdout. Commands run
// on goroutines of their own, so a command that waits (results) does not
// hold up one that measures (stats).

// command is one line from the case to a node.
type command struct {
	ID   uint64          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// reply is one line from a node to the case. The first line a node prints
// is a reply with id 0 that holds its hello.
type reply struct {
	ID   uint64          `json:"id"`
	Err  string          `json:"err,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// hello is what a node says when it is up.
type hello struct {
	PeerInfo ext.PeerInfo `json:"peer_info"`
	WorkerID uint64       `json:"worker_id"`
	PID      int          `json:"pid"`
	Race     bool         `json:"race"`
}

// Arguments and answers of the commands.

type registerArgs struct {
	Peer ext.PeerInfo `json:"peer"`
}

// consumeArgs makes n anchors in set, each read by a goroutine that checks
// the order of the items. A paused set reads nothing until resumed.
type consumeArgs struct {
	Set    string `json:"set"`
	N      int    `json:"n"`
	Paused bool   `json:"paused,omitempty"`
}

type consumeAnswer struct {
	Handles []wire.AnchorHandle `json:"handles"`
}

// produceArgs attaches to each handle and sends numbered items: every
// PaceUS microseconds (0: as fast as credit allows), until finish, or
// Count items when Count > 0 (then it finalizes by itself).
type produceArgs struct {
	Set     string              `json:"set"`
	Handles []wire.AnchorHandle `json:"handles"`
	PaceUS  int                 `json:"pace_us"`
	Payload int                 `json:"payload"`
	Count   int                 `json:"count,omitempty"`
}

type produceAnswer struct {
	Transports []string `json:"transports"`
}

type setArgs struct {
	Set       string `json:"set"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
}

// sentResult is one producer's count when it stopped.
type sentResult struct {
	Handle wire.AnchorHandle `json:"handle"`
	Sent   int               `json:"sent"`
	Err    string            `json:"err,omitempty"`
}

// recvResult is one consumer's count. End is "eof" for a clean end, the
// error text, or "pending" when the stream had not ended by the timeout.
type recvResult struct {
	Handle   wire.AnchorHandle `json:"handle"`
	Received int               `json:"received"`
	InOrder  bool              `json:"in_order"`
	End      string            `json:"end"`
}

type progressAnswer struct {
	MinReceived int `json:"min_received"`
	Ended       int `json:"ended"`
}

// statsArgs: the work of a measurement that costs CPU (a collection, so
// that the heap read is the live heap; a gather of the counters) falls
// outside the CPU window the measurement starts or ends: with Start it
// runs before the CPU is read, else after.
type statsArgs struct {
	Start    bool `json:"start,omitempty"`
	GC       bool `json:"gc,omitempty"`
	Counters bool `json:"counters,omitempty"`
}

// stats is one measurement of a node.
type stats struct {
	WallNS     int64              `json:"wall_ns"` // since the node started, its own clock
	CPUNS      int64              `json:"cpu_ns"`  // user + system, getrusage(RUSAGE_SELF)
	HeapLive   uint64             `json:"heap_live"`
	HeapInuse  uint64             `json:"heap_inuse"`
	Goroutines int                `json:"goroutines"`
	Counters   map[string]float64 `json:"counters"`
}

type eventArgs struct {
	Handle events.Handle `json:"handle"`
}

type eventStatus struct {
	Done bool   `json:"done"`
	Err  string `json:"err,omitempty"`
}

type rvRegisterArgs struct {
	Size int `json:"size"`
}

type rvAnswer struct {
	Handle rendezvous.DataHandle `json:"handle"`
	Sum    string                `json:"sum"` // sha256 of the payload, hex
}

type rvFetchArgs struct {
	Handle rendezvous.DataHandle `json:"handle"`
	Sum    string                `json:"sum"`
	GapMS  int                   `json:"gap_ms,omitempty"`
}

type rvFetchAnswer struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err,omitempty"`
	Chunks int    `json:"chunks,omitempty"`
}
