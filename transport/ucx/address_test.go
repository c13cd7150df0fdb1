package ucx

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// golden is the entry of endpoint{2, 0x5645, 1 MiB, 0xDEADBEEF, 01..05},
// written by hand from rmp_serde's rules for the reference's struct: a
// fixarray of five, each integer in its shortest form, the address a bin8.
const golden = "95" + "02" + "cd5645" + "ce00100000" + "cedeadbeef" + "c405" + "0102030405"

func TestEndpointGoldenBytes(t *testing.T) {
	e := endpoint{v: BlobVersion, amIDBase: AMIDBase, eagerMax: 1 << 20, incarnation: 0xDEADBEEF, workerAddr: []byte{1, 2, 3, 4, 5}}
	if got := hex.EncodeToString(e.encode()); got != golden {
		t.Fatalf("encode = %s\nwant     %s", got, golden)
	}
	b, _ := hex.DecodeString(golden)
	back, err := decodeEndpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.eagerMax != 1<<20 || back.incarnation != 0xDEADBEEF || !bytes.Equal(back.workerAddr, e.workerAddr) {
		t.Fatalf("decoded %+v", back)
	}
	// A 64-bit incarnation takes the u64 form, and a long address a bin16.
	e.incarnation, e.workerAddr = 0x0123456789abcdef, bytes.Repeat([]byte{7}, 300)
	want := "95" + "02" + "cd5645" + "ce00100000" + "cf0123456789abcdef" + "c5012c"
	if got := hex.EncodeToString(e.encode()); !strings.HasPrefix(got, want) || len(got) != len(want)+600 {
		t.Fatalf("encode = %s...", got[:min(len(got), 60)])
	}
}

// A version-1 entry (the reference 0.9's, same fields) is refused with an
// error that names both versions and matches ErrVersionMismatch; so is a
// future version 3.
func TestEndpointRefusesOtherVersions(t *testing.T) {
	for _, v := range []string{"01", "03"} {
		b, _ := hex.DecodeString("95" + v + golden[4:])
		_, err := decodeEndpoint(b)
		if !errors.Is(err, ErrVersionMismatch) || !errors.Is(err, ErrInvalidEndpoint) {
			t.Fatalf("version %s: %v, want ErrVersionMismatch", v, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "version "+v[1:]) || !strings.Contains(msg, "expected 2") {
			t.Fatalf("version %s: %q does not name both versions", v, msg)
		}
	}
}

func TestEndpointRefusals(t *testing.T) {
	for name, h := range map[string]string{
		"empty":          "",
		"a map":          "85" + golden[2:],
		"four fields":    "94" + golden[2:],
		"other AM base":  "9502cd5646" + golden[10:],
		"eager over u32": "9502cd5645cf0000000100000000" + golden[20:],
		"empty address":  "9502cd5645ce00100000cedeadbeefc400",
		"address as str": "9502cd5645ce00100000cedeadbeefa50102030405",
		"truncated":      golden[:len(golden)-2],
		"trailing byte":  golden + "00",
		"negative v":     "95ff" + golden[4:],
	} {
		b, _ := hex.DecodeString(h)
		if _, err := decodeEndpoint(b); !errors.Is(err, ErrInvalidEndpoint) {
			t.Errorf("%s: %v, want ErrInvalidEndpoint", name, err)
		}
	}
}

// The decoded address is a copy: the caller's buffer may be reused.
func TestEndpointCopiesAddress(t *testing.T) {
	b, _ := hex.DecodeString(golden)
	e, err := decodeEndpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !bytes.Equal(e.workerAddr, []byte{1, 2, 3, 4, 5}) {
		t.Fatal("the worker address aliases the input")
	}
}

// FuzzDecodeEndpoint: the decoder never panics, and what it accepts
// encodes to an entry that decodes to the same value.
func FuzzDecodeEndpoint(f *testing.F) {
	b, _ := hex.DecodeString(golden)
	f.Add(b)
	f.Add([]byte{0x95, 0x01})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add(endpoint{v: 2, amIDBase: AMIDBase, eagerMax: 1, incarnation: 1 << 63, workerAddr: make([]byte, 70000)}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEndpoint(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidEndpoint) {
				t.Fatalf("error %v does not match ErrInvalidEndpoint", err)
			}
			return
		}
		back, err := decodeEndpoint(e.encode())
		if err != nil || back.v != e.v || back.eagerMax != e.eagerMax || back.incarnation != e.incarnation || !bytes.Equal(back.workerAddr, e.workerAddr) {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", e, back, err)
		}
	})
}
