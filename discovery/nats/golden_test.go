package nats

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/ext"
)

var goldenID, _ = ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")

// TestBase58 pins the alphabet and the leading-zero rule (bs58's Bitcoin
// alphabet, which the reference uses).
func TestBase58(t *testing.T) {
	for in, want := range map[string]string{
		"Hello World!":           "2NEpo7TZRRrLZSi2U",
		"\x00\x00\x01":           "112",
		string(goldenID[:]):      "EinDm6PZoghYgBNeYjwpY7",
		string(make([]byte, 16)): "1111111111111111",
	} {
		if got := base58([]byte(in)); got != want {
			t.Errorf("base58(%x) = %s, want %s", in, got, want)
		}
	}
}

// TestSubjectsGolden pins the subjects of lib/velo/src/discovery/nats/subjects.rs.
func TestSubjectsGolden(t *testing.T) {
	if got, want := InstanceSubject("prod", goldenID), "prod.velo.discover.instance.EinDm6PZoghYgBNeYjwpY7"; got != want {
		t.Errorf("instance subject %s, want %s", got, want)
	}
	if got, want := WorkerSubject("prod", goldenID.WorkerID()), "prod.velo.discover.worker.12787630856952281325"; got != want {
		t.Errorf("worker subject %s, want %s", got, want)
	}
}

// TestPeerInfoGolden pins the reply body: rmp_serde's compact form of
// PeerInfo, an array of [bin16 uuid, bin address].
func TestPeerInfoGolden(t *testing.T) {
	info := ext.PeerInfo{InstanceID: goldenID, Address: ext.WorkerAddress{"tcp": []byte("h:1")}}
	want := []byte{0x92, 0xc4, 0x10}
	want = append(want, goldenID[:]...)
	want = append(want, 0xc4, 9, 0x81, 0xa3, 't', 'c', 'p', 0x93, 'h', ':', '1')
	got := EncodePeerInfo(info)
	if !bytes.Equal(got, want) {
		t.Fatalf("body\n got %x\nwant %x", got, want)
	}
	back, err := DecodePeerInfo(got)
	if err != nil || back.InstanceID != goldenID || string(back.Address["tcp"]) != "h:1" {
		t.Fatalf("decode: %+v, %v", back, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := EncodePeerInfo(ext.PeerInfo{InstanceID: goldenID, Address: ext.WorkerAddress{"tcp": []byte("h:1")}})
	for i := range good {
		if _, err := DecodePeerInfo(good[:i]); err == nil {
			t.Fatalf("a body cut at %d decoded", i)
		}
	}
	if _, err := DecodePeerInfo(append(good, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodePeerInfo([]byte{0x92, 0xc6, 0xff, 0xff, 0xff, 0xff}); err == nil {
		t.Fatal("a length prefix with nothing behind it decoded")
	}
}

func FuzzDecodePeerInfo(f *testing.F) {
	f.Add(EncodePeerInfo(ext.PeerInfo{InstanceID: goldenID, Address: ext.WorkerAddress{"tcp": []byte("h:1")}}))
	f.Add([]byte{0x92, 0xc4, 0x10})
	f.Add([]byte{0x92, 0xc6, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePeerInfo(b)
		if err == nil {
			if _, err := DecodePeerInfo(EncodePeerInfo(p)); err != nil {
				t.Fatalf("re-encoded body fails: %v", err)
			}
		}
	})
}
