package fs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/zeebo/xxh3"
)

// peerFile is the file's shape, as the reference writes it:
//
//	{"peers":[{"instance_id":"<uuid>","worker_id":<u64>,
//	           "worker_address":[<bytes>],"address_checksum":<u64>}]}
//
// worker_address is the MessagePack address as a JSON array of numbers and
// address_checksum is xxh3_64 of those bytes.
type peerFile struct {
	Peers []peerEntry `json:"peers"`
}

type peerEntry struct {
	InstanceID ext.InstanceID `json:"instance_id"`
	WorkerID   uint64         `json:"worker_id"`
	Address    byteArray      `json:"worker_address"`
	Checksum   uint64         `json:"address_checksum"`
}

func newEntry(p ext.PeerInfo) peerEntry {
	enc := p.Address.Encode()
	return peerEntry{InstanceID: p.InstanceID, WorkerID: uint64(p.WorkerID()), Address: enc, Checksum: xxh3.Hash(enc)}
}

func (e peerEntry) info() (ext.PeerInfo, error) {
	addr, err := ext.DecodeWorkerAddress(e.Address)
	if err != nil {
		return ext.PeerInfo{}, fmt.Errorf("fs discovery: peer %s: %w", e.InstanceID, err)
	}
	return ext.PeerInfo{InstanceID: e.InstanceID, Address: addr}, nil
}

// Peers is peer discovery on one JSON file. It implements
// ext.PeerDiscovery, ext.PeerRegistrar and ext.PeerWatcher (by reading
// the file every PollInterval).
type Peers struct {
	f jsonFile
	// PollInterval is how often a removal watch reads the file; set it
	// before the first watch. Zero means DefaultPollInterval.
	PollInterval time.Duration
}

// NewPeers uses the file at path; it is created on the first registration.
func NewPeers(path string) *Peers { return &Peers{f: jsonFile{path: path}} }

// Register adds or replaces this instance's entry. It fails when another
// instance already holds the same worker id.
func (d *Peers) Register(_ context.Context, self ext.PeerInfo) error {
	var pf peerFile
	return d.f.update(&pf, func() error {
		out := pf.Peers[:0]
		for _, e := range pf.Peers {
			if e.WorkerID == uint64(self.WorkerID()) && e.InstanceID != self.InstanceID {
				return fmt.Errorf("fs discovery: worker id %s is held by instance %s", self.WorkerID(), e.InstanceID)
			}
			if e.InstanceID != self.InstanceID {
				out = append(out, e)
			}
		}
		pf.Peers = append(out, newEntry(self))
		return nil
	})
}

// Unregister removes the instance's entry; a missing entry is no error.
func (d *Peers) Unregister(_ context.Context, id ext.InstanceID) error {
	var pf peerFile
	return d.f.update(&pf, func() error {
		out := pf.Peers[:0]
		for _, e := range pf.Peers {
			if e.InstanceID != id {
				out = append(out, e)
			}
		}
		pf.Peers = out
		return nil
	})
}

// RegisterPeer registers self and returns a guard that removes it.
func (d *Peers) RegisterPeer(ctx context.Context, self ext.PeerInfo) (ext.Registration, error) {
	if err := d.Register(ctx, self); err != nil {
		return nil, err
	}
	return &guard{undo: func(ctx context.Context) error { return d.Unregister(ctx, self.InstanceID) }}, nil
}

// DiscoverInstance reads the file and returns the instance's entry.
func (d *Peers) DiscoverInstance(_ context.Context, id ext.InstanceID) (ext.PeerInfo, error) {
	return d.find(func(e peerEntry) bool { return e.InstanceID == id }, id.String())
}

// DiscoverWorker reads the file and returns the worker's entry.
func (d *Peers) DiscoverWorker(_ context.Context, id ext.WorkerID) (ext.PeerInfo, error) {
	return d.find(func(e peerEntry) bool { return e.WorkerID == uint64(id) }, "worker "+id.String())
}

func (d *Peers) find(match func(peerEntry) bool, what string) (ext.PeerInfo, error) {
	var pf peerFile
	if err := d.f.read(&pf); err != nil {
		return ext.PeerInfo{}, err
	}
	for _, e := range pf.Peers {
		if match(e) {
			return e.info()
		}
	}
	return ext.PeerInfo{}, fmt.Errorf("%w: %s in %s", ext.ErrPeerNotFound, what, d.f.path)
}

// guard runs undo once; later calls return nil.
type guard struct {
	once sync.Once
	undo func(context.Context) error
}

func (g *guard) Unregister(ctx context.Context) error {
	var err error
	g.once.Do(func() { err = g.undo(ctx) })
	return err
}
