package etcdstore

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// value is a record as stored in etcd: JSON, with the op id of the write
// that produced it, so a read-back can tell whose write is current.
type value struct {
	Peer        ext.PeerInfo                `json:"peer"`
	Epoch       protocol.Epoch              `json:"epoch"`
	Extensions  map[string]json.RawMessage  `json:"extensions,omitempty"`
	Pinned      bool                        `json:"pinned,omitempty"`
	Credentials []protocol.CredentialDigest `json:"credentials,omitempty"`
	Op          string                      `json:"op"`
}

func encodeValue(op store.OpID, r store.Record) ([]byte, error) {
	return json.Marshal(value{
		Peer: r.Peer, Epoch: r.Epoch, Extensions: r.Extensions, Pinned: r.Pinned,
		Credentials: r.Credentials, Op: op.String(),
	})
}

func decodeValue(b []byte) (store.Record, store.OpID, error) {
	var v value
	if err := json.Unmarshal(b, &v); err != nil {
		return store.Record{}, store.OpID{}, fmt.Errorf("etcdstore: record: %w", err)
	}
	var op store.OpID
	if len(v.Op) != 2*len(op) {
		return store.Record{}, store.OpID{}, fmt.Errorf("etcdstore: record has a bad op id %q", v.Op)
	}
	if _, err := hex.Decode(op[:], []byte(v.Op)); err != nil {
		return store.Record{}, store.OpID{}, fmt.Errorf("etcdstore: record has a bad op id %q", v.Op)
	}
	r := store.Record{Peer: v.Peer, Epoch: v.Epoch, Extensions: v.Extensions, Pinned: v.Pinned, Credentials: v.Credentials}
	return r, op, nil
}

type keys struct{ lock, instances, ops, all string }

func keysOf(prefix string) keys {
	return keys{lock: prefix + "/lock", instances: prefix + "/instances/", ops: prefix + "/ops/", all: prefix + "/"}
}

func (k keys) instance(id ext.InstanceID) string { return k.instances + id.String() }
func (k keys) op(op store.OpID) string           { return k.ops + op.String() }

// idOf reads the instance id from an instance key.
func (k keys) idOf(key []byte) (ext.InstanceID, bool) {
	if len(key) <= len(k.instances) || string(key[:len(k.instances)]) != k.instances {
		return ext.InstanceID{}, false
	}
	id, err := ext.ParseInstanceID(string(key[len(k.instances):]))
	return id, err == nil
}
