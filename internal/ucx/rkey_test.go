package ucx

import (
	"bytes"
	"errors"
	"testing"
)

// Keys as UCX 1.13 packs them for host memory (md_map, mem_type, then a
// size byte per domain), seen with UCX_TLS=tcp, sm,self and tcp,sm,self.
var packedKeys = [][]byte{
	{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	{0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	{0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	// Two domains with key bytes, then a device trailer and one distance.
	{0x05, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0xaa, 0xbb, 1, 0xcc, 3, 1, 2, 3},
}

func TestCheckRkeyAcceptsPackedKeys(t *testing.T) {
	for _, k := range packedKeys {
		if err := checkRkey(k); err != nil {
			t.Errorf("%x: %v", k, err)
		}
	}
}

func TestCheckRkeyRefuses(t *testing.T) {
	cases := map[string][]byte{
		"empty":          nil,
		"short":          {1, 0, 0},
		"no domain":      {0, 0, 0, 0, 0, 0, 0, 0, 0},
		"memory type":    {1, 0, 0, 0, 0, 0, 0, 0, memTypeLast, 0},
		"truncated":      {0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"runs past":      {0x01, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 2},
		"trailer":        {0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 1},
		"zero padded":    append(append([]byte{}, packedKeys[0]...), 0, 0),
		"over the bound": append(append([]byte{}, packedKeys[0]...), make([]byte, MaxRkeyLen)...),
	}
	for name, k := range cases {
		if err := checkRkey(k); !errors.Is(err, ErrBadRkey) {
			t.Errorf("%s: %x: got %v, want ErrBadRkey", name, k, err)
		}
	}
}

// FuzzCheckRkey: the pre-parse never panics, and what it accepts is
// framed: every domain entry and the trailer lie inside the key.
func FuzzCheckRkey(f *testing.F) {
	for _, k := range packedKeys {
		f.Add(k)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, key []byte) {
		if checkRkey(key) != nil {
			return
		}
		if len(key) < 9 || len(key) > MaxRkeyLen || key[8] >= memTypeLast {
			t.Fatalf("accepted %x", key)
		}
		if bytes.Equal(key[:8], make([]byte, 8)) {
			t.Fatalf("accepted a key with no domain: %x", key)
		}
	})
}
