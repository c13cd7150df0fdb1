package streaming

// The mux's configuration: flush policies, MuxConfig and its defaults.

import (
	"time"

	"github.com/velo-go/velo/streaming/internal/mux"
)

// FlushPolicy says when a batcher writes what producers staged.
type FlushPolicy uint8

const (
	// FlushAuto writes at the end of every batcher wake: the batcher takes
	// everything already queued and never waits for more (the default).
	// It is the Rust reference's Auto{on_admission: true}.
	FlushAuto FlushPolicy = iota
	// FlushManual writes data only when the application calls
	// Manager.FlushBatch. Terminals, closes and credit replies still go
	// on their own.
	FlushManual
	// FlushLinger holds data for up to MuxConfig.MaxLinger after the
	// oldest staged record, so that records that come close together share
	// a write (the Rust reference's Auto{on_admission: false, max_linger}).
	// OnComplete and AtBytes end the window early.
	FlushLinger
)

// MuxConfig sets the messenger mux. The zero value of a field means its
// default.
type MuxConfig struct {
	// Disabled turns the mux off: attaches negotiate the per-stream path.
	Disabled bool
	// InitialCredit is the window C of records a slot opens with (32).
	InitialCredit uint32
	// SlotByteBudget caps the bytes one slot holds unsent (1 MiB).
	SlotByteBudget int
	// PeerByteBudget caps the bytes all the slots to one peer hold unsent
	// (8 MiB); a slot's first record always goes in.
	PeerByteBudget int
	// MaxBatchBytes cuts a batch (60 KiB).
	MaxBatchBytes int
	// ReplyLinger is how long a batch of only credit replies waits for
	// company (1 ms).
	ReplyLinger time.Duration
	// DrainVisitFloor is the least time between two doorbell visits of one
	// peer (2 ms).
	DrainVisitFloor time.Duration
	// CreditSweepInterval is the period of the whole-table credit walk,
	// which also evicts idle batchers (200 ms).
	CreditSweepInterval time.Duration
	// AsyncOpenAck returns from an attach as soon as its OpenSlot is
	// queued for the batcher, instead of after the transport took it. The
	// slot's records cannot overtake it: the batcher writes queued
	// OpenSlots before any data. A refused OpenSlot is epoch death, and
	// the producer's sends then fail.
	AsyncOpenAck bool
	// WaitForAttach makes every AttachAnchor wait for the owner's answer,
	// as the reference does. By default an attach to an owner instance
	// that has already answered this node with the mux returns once its
	// request is sent, and the stream's records wait for the answer
	// (a pipelined attach: docs/mux.md). Under FlushManual attaches
	// always wait.
	WaitForAttach bool
	// BatcherIdleTTL is how long a batcher with no live slot lives (60 s).
	BatcherIdleTTL time.Duration
	// Flush is the flush policy (FlushAuto).
	Flush FlushPolicy
	// MaxLinger is the window of FlushLinger (2 ms).
	MaxLinger time.Duration
	// OnComplete, under FlushLinger, writes as soon as every live slot of
	// the batcher has a record staged, but not sooner than MaxLinger after
	// the last write that carried data: a lone stream's records go at once
	// when they come further apart than the window.
	OnComplete bool
	// AtBytes, under FlushLinger, writes once this many bytes are staged
	// (0: no such limit).
	AtBytes int
}

// internal is c in the mux's own type.
func (c MuxConfig) internal() mux.Config {
	return mux.Config{
		Disabled:            c.Disabled,
		InitialCredit:       c.InitialCredit,
		SlotByteBudget:      c.SlotByteBudget,
		PeerByteBudget:      c.PeerByteBudget,
		MaxBatchBytes:       c.MaxBatchBytes,
		ReplyLinger:         c.ReplyLinger,
		DrainVisitFloor:     c.DrainVisitFloor,
		CreditSweepInterval: c.CreditSweepInterval,
		AsyncOpenAck:        c.AsyncOpenAck,
		WaitForAttach:       c.WaitForAttach,
		BatcherIdleTTL:      c.BatcherIdleTTL,
		Flush:               mux.FlushPolicy(c.Flush),
		MaxLinger:           c.MaxLinger,
		OnComplete:          c.OnComplete,
		AtBytes:             c.AtBytes,
	}
}
