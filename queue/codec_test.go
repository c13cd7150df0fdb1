package queue_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/velo-go/velo/queue"
)

// job names its fields as a Rust struct would; the names matter only when
// reading the map form.
type job struct {
	ID      uint64 `msgpack:"id"`
	Payload string `msgpack:"payload"`
}

// TestCodecGolden pins the item body to what the Rust reference writes
// (rmp_serde::to_vec): a struct is an array of its fields, integers are as
// short as they can be.
func TestCodecGolden(t *testing.T) {
	cases := []struct {
		name string
		v    any
		hex  string
	}{
		{"struct", job{1, "work"}, "9201a4776f726b"},
		{"big id", job{300, ""}, "92cd012ca0"},
		{"u64 max", uint64(1<<64 - 1), "cfffffffffffffffff"},
		{"negative", int64(-5), "fb"},
		{"string", "hi", "a26869"},
		{"float64", 1.5, "cb3ff8000000000000"},
		{"nil slice", []int(nil), "90"}, // an empty Vec, which Rust can read
	}
	for _, c := range cases {
		got, err := queue.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := hex.DecodeString(c.hex)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %s", c.name, got, c.hex)
		}
	}
}

func TestCodecReadsArrayAndMap(t *testing.T) {
	var j job
	arr, _ := hex.DecodeString("9201a4776f726b")
	if err := queue.Unmarshal(arr, &j); err != nil || j != (job{1, "work"}) {
		t.Fatalf("array form: %+v %v", j, err)
	}
	// rmp_serde::to_vec_named writes a map; read it too.
	m, _ := hex.DecodeString("82a2696401a77061796c6f6164a4776f726b")
	j = job{}
	if err := queue.Unmarshal(m, &j); err != nil || j != (job{1, "work"}) {
		t.Fatalf("map form: %+v %v", j, err)
	}
}
