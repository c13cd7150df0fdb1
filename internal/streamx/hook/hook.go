// Package hook carries streaming's internal entry points to package
// streamx without an import cycle, as internal/msgrx/hook does for the
// messenger: streaming's init stores each one here as a plain value, and
// streamx asserts each to its type once, when it is initialized.
//
// It imports only the standard library, so streaming may import it.
package hook

// Fns is filled by package streaming's init; every field is a function.
var Fns struct {
	ActiveAnchors, ActiveSenders, ConsumerWakes, UnattachedExpired  any
	HeartbeatInterval, StreamAddr, WatchdogFirings, ReservationConf any
	MuxStats                                                        any
}

// MuxStats is a snapshot of one node's mux counts.
type MuxStats struct {
	BatchesSent, RecordsSent         uint64
	BatchesReceived, RecordsReceived uint64
	LiveSlotsOut, LiveSlotsIn        int // open slots: this node's producers, and streams into it
	CreditExhausted                  uint64
	EpochDeaths                      uint64
	ProtocolErrors                   uint64
	WatchdogFirings                  uint64
	// BatcherWakes counts the wakes of this node's batcher goroutines:
	// divided by the records sent, it is the wakes per record.
	BatcherWakes uint64
}
