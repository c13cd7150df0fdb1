package etcdstore

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// FuzzDecodeValue: a stored value either decodes and re-encodes to one
// that decodes the same, or is refused; never a panic. The store skips a
// value it cannot decode (it did not write it).
func FuzzDecodeValue(f *testing.F) {
	r := store.Record{Peer: ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("h:1")}},
		Epoch: 3, Credentials: []protocol.CredentialDigest{protocol.NewCredential().Digest()}}
	good, _ := encodeValue(store.NewOpID(), r)
	f.Add(good)
	f.Add([]byte(`{"op":"00"}`))
	f.Add([]byte(`{"credentials":["zz"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, op, err := decodeValue(b)
		if err != nil {
			return
		}
		again, err := encodeValue(op, rec)
		if err != nil {
			t.Fatal(err)
		}
		rec2, op2, err := decodeValue(again)
		if err != nil || op2 != op || rec2.Peer.InstanceID != rec.Peer.InstanceID || rec2.Epoch != rec.Epoch {
			t.Fatalf("round trip: %v", err)
		}
	})
}
