// Package jsqueue is the queue backend on NATS JetStream.
//
// Each named queue is a JetStream stream with WorkQueue retention and one
// durable pull consumer with explicit acknowledgement, named as the Rust
// reference names them, so Go and Rust nodes share queues:
//
//	stream    {cluster}_{name}   (dots replaced by '_')
//	subject   {cluster}.queue.{name}
//	consumer  {cluster}_{name}_worker
//
// Promise: every item sent is delivered at least once and, once
// acknowledged, never again. An item a receiver holds and does not settle
// (the receiver crashed, or closed its handle) goes to a receiver again
// after the consumer's ack wait. Items of one producer leave in the order
// sent, until a redelivery puts an old item after newer ones. With a
// capacity, the stream keeps at most that many items and refuses more
// (TrySend fails with queue.ErrFull; Send tries again until there is room). Closing a sender ends only
// that handle: the stream stays, as in the reference.
package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/velo-go/velo/queue"
)

// Config shapes the streams and consumers the backend creates. They apply
// only when the backend creates them; an existing stream keeps its own.
type Config struct {
	// ClusterID prefixes every stream, subject and consumer name.
	ClusterID string
	// Capacity is the most items a queue keeps; 0 means no bound (the
	// reference's default).
	Capacity int
	// AckWait is how long an unsettled item stays with a receiver before
	// it is delivered again; 0 takes the server's default (30 s).
	AckWait time.Duration
	// Batch is how many items a receiver pulls at a time (default 32). A
	// receiver holds up to this many unsettled items.
	Batch int
	// PullWait bounds one pull request (default 1 s).
	PullWait time.Duration
}

// Backend maps named queues to JetStream streams.
type Backend struct {
	js  jetstream.JetStream
	cfg Config
	mu  sync.Mutex
	con map[string]jetstream.Consumer
}

// New returns a backend that uses nc, which the caller keeps and closes.
func New(nc *nats.Conn, cfg Config) (*Backend, error) {
	if cfg.ClusterID == "" {
		return nil, errors.New("jsqueue: ClusterID is required")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.PullWait <= 0 {
		cfg.PullWait = time.Second
	}
	return &Backend{js: js, cfg: cfg, con: make(map[string]jetstream.Consumer)}, nil
}

// StreamName is the stream that holds the named queue.
func StreamName(cluster, name string) string {
	return strings.ReplaceAll(cluster+"_"+name, ".", "_")
}

// Subject is the subject items of the named queue are published on.
func Subject(cluster, name string) string { return cluster + ".queue." + name }

// ConsumerName is the durable consumer that receivers of the queue share.
func ConsumerName(cluster, name string) string { return StreamName(cluster, name) + "_worker" }

// OpenSender implements queue.Backend.
func (b *Backend) OpenSender(ctx context.Context, name string) (queue.RawSender, error) {
	if _, err := b.consumer(ctx, name); err != nil {
		return nil, err
	}
	return &sender{js: b.js, subject: Subject(b.cfg.ClusterID, name)}, nil
}

// OpenReceiver implements queue.Backend.
func (b *Backend) OpenReceiver(ctx context.Context, name string) (queue.RawReceiver, error) {
	c, err := b.consumer(ctx, name)
	if err != nil {
		return nil, err
	}
	return newReceiver(c, b.cfg), nil
}

// consumer gets or creates the stream and the consumer of the named queue.
func (b *Backend) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.con[name]; c != nil {
		return c, nil
	}
	s, err := b.stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("jsqueue: stream of %q: %w", name, err)
	}
	cname := ConsumerName(b.cfg.ClusterID, name)
	c, err := s.Consumer(ctx, cname)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c, err = s.CreateConsumer(ctx, b.consumerConfig(cname))
	}
	if err != nil {
		return nil, fmt.Errorf("jsqueue: consumer of %q: %w", name, err)
	}
	b.con[name] = c
	return c, nil
}

func (b *Backend) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := b.js.Stream(ctx, StreamName(b.cfg.ClusterID, name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = b.js.CreateStream(ctx, b.streamConfig(name))
	}
	return s, err
}

func (b *Backend) streamConfig(name string) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:      StreamName(b.cfg.ClusterID, name),
		Subjects:  []string{Subject(b.cfg.ClusterID, name)},
		Retention: jetstream.WorkQueuePolicy,
	}
	if b.cfg.Capacity > 0 {
		sc.MaxMsgs = int64(b.cfg.Capacity)
		sc.Discard = jetstream.DiscardNew
	}
	return sc
}

func (b *Backend) consumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:   name,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   b.cfg.AckWait,
	}
}
