package soak

import (
	"math/rand/v2"
	"testing"
)

// send records n tries of key, failing the seqs in failed.
func send(o *Outbox, key string, kind Kind, n uint32, failed ...uint32) {
	for seq := uint32(0); seq < n; seq++ {
		o.Tried(key, kind, seq, 1000)
	}
	for _, f := range failed {
		o.Failed(key, kind, f)
	}
}

func TestOracleCleanRunPasses(t *testing.T) {
	o, in := NewOutbox(), NewInbox()
	send(o, "u", KindUnary, 100)
	for seq := uint32(0); seq < 100; seq++ {
		in.Got("u", seq, true)
	}
	v := Check(o.Keys(), in.Keys(), nil)
	if v.Failed() || v.Items[KindUnary] != 100 {
		t.Fatalf("clean run: %+v", v)
	}
}

func TestOracleFindsLossDuplicateReorderCorruption(t *testing.T) {
	cases := []struct {
		name  string
		kind  Kind
		recv  func(in *Inbox)
		check func(Verdict) bool
	}{
		{"loss", KindUnary, func(in *Inbox) {
			for seq := uint32(0); seq < 10; seq++ {
				if seq != 4 {
					in.Got("k", seq, true)
				}
			}
		}, func(v Verdict) bool { return v.Lost[KindUnary] == 1 }},
		{"duplicate", KindUnary, func(in *Inbox) {
			for seq := uint32(0); seq < 10; seq++ {
				in.Got("k", seq, true)
			}
			in.Got("k", 3, true)
		}, func(v Verdict) bool { return v.Dups[KindUnary] == 1 }},
		{"reorder", KindToken, func(in *Inbox) {
			for _, seq := range []uint32{0, 1, 3, 2, 4, 5, 6, 7, 8, 9} {
				in.Got("k", seq, true)
			}
		}, func(v Verdict) bool { return v.Reordered[KindToken] == 1 }},
		{"corruption", KindStaged, func(in *Inbox) {
			for seq := uint32(0); seq < 10; seq++ {
				in.Got("k", seq, seq != 7)
			}
		}, func(v Verdict) bool { return v.Corrupt[KindStaged] == 1 && v.Lost[KindStaged] == 1 }},
		{"an item nobody sent", KindUnary, func(in *Inbox) {
			for seq := uint32(0); seq < 11; seq++ {
				in.Got("k", seq, true)
			}
		}, func(v Verdict) bool { return v.Unknown == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, in := NewOutbox(), NewInbox()
			send(o, "k", c.kind, 10)
			c.recv(in)
			v := Check(o.Keys(), in.Keys(), nil)
			if !v.Failed() || !c.check(v) {
				t.Fatalf("%s not found: %+v", c.name, v)
			}
		})
	}
}

// A send that failed with an error is no loss; neither is a stream's
// tail after an error at either end. A gap before that tail is.
func TestOracleExcusesErrors(t *testing.T) {
	o, in := NewOutbox(), NewInbox()
	send(o, "u", KindUnary, 10, 3, 8)
	for seq := uint32(0); seq < 10; seq++ {
		if seq != 3 && seq != 8 {
			in.Got("u", seq, true)
		}
	}
	send(o, "s1", KindToken, 10)
	o.End("s1", KindToken) // the producer saw the error
	for seq := uint32(0); seq < 6; seq++ {
		in.Got("s1", seq, true)
	}
	send(o, "s2", KindToken, 10)
	for seq := uint32(0); seq < 4; seq++ {
		in.Got("s2", seq, true)
	}
	in.End("s2") // the reader saw the error
	in.End("s3") // a stream whose request never reached the producer
	v := Check(o.Keys(), in.Keys(), nil)
	if v.Failed() || v.Excused[KindUnary] != 2 || v.Excused[KindToken] != 10 {
		t.Fatalf("errors not excused: %+v", v)
	}

	o, in = NewOutbox(), NewInbox()
	send(o, "s", KindToken, 10)
	o.End("s", KindToken)
	for _, seq := range []uint32{0, 1, 3} {
		in.Got("s", seq, true)
	}
	if v := Check(o.Keys(), in.Keys(), nil); v.Lost[KindToken] != 1 {
		t.Fatalf("a gap before an excused tail is loss: %+v", v)
	}
}

// Fire-and-forget is at most once: an item missing from an epoch sent
// during a fault is counted, not failed; the same outside any fault is
// loss.
func TestOracleFireAndForgetNearFaults(t *testing.T) {
	o, in := NewOutbox(), NewInbox()
	send(o, "f", KindFire, 5)
	in.Got("f", 0, true)
	during := func(from, to int64) bool { return true }
	if v := Check(o.Keys(), in.Keys(), during); v.Failed() || v.FaultDropped != 4 {
		t.Fatalf("during a fault: %+v", v)
	}
	if v := Check(o.Keys(), in.Keys(), func(int64, int64) bool { return false }); v.Lost[KindFire] != 4 {
		t.Fatalf("away from faults: %+v", v)
	}
}

func TestInboxRanges(t *testing.T) {
	in := NewInbox()
	for _, seq := range []uint32{0, 1, 2, 5, 63, 64, 65, 200} {
		in.Got("k", seq, true)
	}
	got := in.Keys()[0].Seen
	want := [][2]uint32{{0, 3}, {5, 6}, {63, 66}, {200, 201}}
	if len(got) != len(want) {
		t.Fatalf("ranges %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ranges %v, want %v", got, want)
		}
	}
	if in.Count("k") != 8 {
		t.Fatalf("count %d", in.Count("k"))
	}
}

func TestItemRoundTripAndCorruption(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := encodeItem("key", 42, 100, r)
	k, seq, ok, err := decodeItem(b)
	if err != nil || k != "key" || seq != 42 || !ok {
		t.Fatalf("decode: %q %d %v %v", k, seq, ok, err)
	}
	b[len(b)/2] ^= 1
	if _, _, ok, _ := decodeItem(b); ok {
		t.Fatal("a flipped bit passed the checksum")
	}
}

func FuzzDecodeItem(f *testing.F) {
	f.Add(encodeItem("k", 1, 10, rand.New(rand.NewPCG(1, 1))))
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeItem(b) // must not panic
	})
}
