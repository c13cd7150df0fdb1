package mux

import (
	"errors"
	"time"
)

// FlushPolicy is streaming.FlushPolicy, whose documentation says what
// each policy does.
type FlushPolicy uint8

// The policies, with the values of streaming's.
const (
	FlushAuto FlushPolicy = iota
	FlushManual
	FlushLinger
)

// Config is streaming.Config in the mux's own type: the same fields,
// documented there. The zero value of a field means its default
// (WithDefaults).
type Config struct {
	Disabled            bool
	InitialCredit       uint32
	SlotByteBudget      int
	PeerByteBudget      int
	MaxBatchBytes       int
	ReplyLinger         time.Duration
	DrainVisitFloor     time.Duration
	CreditSweepInterval time.Duration
	AsyncOpenAck        bool
	WaitForAttach       bool
	BatcherIdleTTL      time.Duration
	Flush               FlushPolicy
	MaxLinger           time.Duration
	OnComplete          bool
	AtBytes             int
}

// coalesceThreshold is the size up to which the transports' writer packs
// frames into one write; messengerEnvelope is room for the messenger's
// frame preamble and header around a batch.
const (
	CoalesceThreshold = 64 << 10
	messengerEnvelope = 256
)

// DefaultInitialCredit is a mux slot's credit window unless configured.
const DefaultInitialCredit = 32

// maxMuxSlots bounds the slot indices of one batcher, as the book's table
// of 65,536 per (peer, lane).
const maxMuxSlots = 1 << 16

var errSlotsExhausted = errors.New("velo: mux: every slot index to this peer is in use")

func (c Config) WithDefaults() Config {
	if c.InitialCredit == 0 {
		c.InitialCredit = DefaultInitialCredit
	}
	if c.SlotByteBudget <= 0 {
		c.SlotByteBudget = 1 << 20
	}
	if c.PeerByteBudget <= 0 {
		c.PeerByteBudget = 8 << 20
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 60 << 10
	}
	// The coalescing writer packs a frame into its buffered write only up
	// to 64 KiB; a larger batch would be written in segments and give the
	// saving back, so that threshold caps the batch too. (The eager budget,
	// the transport's 16 MiB frame, is larger still.)
	c.MaxBatchBytes = min(c.MaxBatchBytes, CoalesceThreshold-messengerEnvelope)
	if c.ReplyLinger <= 0 {
		c.ReplyLinger = time.Millisecond
	}
	if c.DrainVisitFloor <= 0 {
		c.DrainVisitFloor = 2 * time.Millisecond
	}
	if c.CreditSweepInterval <= 0 {
		c.CreditSweepInterval = 200 * time.Millisecond
	}
	if c.MaxLinger <= 0 {
		c.MaxLinger = 2 * time.Millisecond
	}
	if c.BatcherIdleTTL <= 0 {
		c.BatcherIdleTTL = 60 * time.Second
	}
	return c
}

// inletRecords is how many records a slot queues before Send waits: the
// book's inlet of C+1.
func (c Config) inletRecords() int { return int(c.InitialCredit) + 1 }
