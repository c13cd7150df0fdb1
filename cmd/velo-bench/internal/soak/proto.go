package soak

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// The control protocol between the driver and its children: one JSON
// object a line, the driver's on the child's stdin, the child's on its
// stdout. The driver says config; the child answers hello with its
// PeerInfo; the driver says peers (every other child's PeerInfo, its
// address that of the child's fault proxy when --faults is on); the
// child answers ready once every peer serves its handlers; run starts
// the workload, during which the child sends a sample a second; stop
// ends it, and the child answers stopped once its last items are out and
// its peers have read its fire-and-forget ones; report asks for the
// ledger; exit ends the child.

// ChildConfig is what one child needs.
type ChildConfig struct {
	Workload  string        `json:"workload"`
	Transport string        `json:"transport"`
	Index     int           `json:"index"`
	Seed      uint64        `json:"seed"`
	Timeout   time.Duration `json:"timeout"` // of one call
	Rate      int           `json:"rate"`    // operations a second, per peer
	// ListenAddr and AdvertiseAddr, with --faults: the child listens on
	// the one and tells its peers the other, its proxy's.
	ListenAddr    string `json:"listen,omitempty"`
	AdvertiseAddr string `json:"advertise,omitempty"`
	// Leak, a test switch, leaks one goroutine per request handled.
	Leak bool `json:"leak,omitempty"`
	// Lose, a test switch, makes the unary handler forget every 100th
	// item it answers: a silent loss the oracle must find.
	Lose bool `json:"lose,omitempty"`
}

// msg is one line of the protocol.
type msg struct {
	Op     string         `json:"op"`
	Err    string         `json:"err,omitempty"`
	Config *ChildConfig   `json:"config,omitempty"`
	Peer   *ext.PeerInfo  `json:"peer,omitempty"`
	Peers  []ext.PeerInfo `json:"peers,omitempty"`
	Sample *Tick          `json:"sample,omitempty"`
	Report *Ledger        `json:"report,omitempty"`
}

// Tick is what a child says once a second during the run.
type Tick struct {
	Goroutines int   `json:"g"` // the floor of ten readings over the second
	Ops        int64 `json:"ops"`
	Items      int64 `json:"items"`
	Bytes      int64 `json:"bytes"`
	Errors     int64 `json:"errors"`
	P50        int64 `json:"p50"` // ns, over the second
	P99        int64 `json:"p99"`
}

// Ledger is a child's report at the end.
type Ledger struct {
	Sent    []SentKey        `json:"sent"`
	Got     []GotKey         `json:"got"`
	Latency *Hist            `json:"latency"`
	Errors  map[string]int64 `json:"errors"`
	// FirstErrors holds the first message of each kind of error.
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	Ops         int64             `json:"ops"`
	Items       int64             `json:"items"`
	Bytes       int64             `json:"bytes"`
}
