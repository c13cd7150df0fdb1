package nats

import (
	"encoding/hex"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/velo-go/velo/ext"
)

var goldenID, _ = ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")

// TestBase58Golden pins the encoder to the Bitcoin alphabet and its
// leading-zero rule (the bs58 crate the reference uses): vectors from
// Bitcoin Core's base58_encode_decode.json and the id that
// discovery/nats pins too.
func TestBase58Golden(t *testing.T) {
	for in, want := range map[string]string{
		"":       "",
		"61":     "2g",
		"626262": "a3gV",
		"636363": "aPEr",
		"73696d706c792061206c6f6e6720737472696e67":           "2cFupjhnEsSn59qHXstmK2ffpLv2",
		"00eb15231dfceb60925886b67d065299925915aeb172c06647": "1NS17iag9jJgTHD1VXjvLCEnZuQ3rJDE9L",
		"516b6fcd0f":                       "ABnLTmg",
		"bf4f89001e670274dd":               "3SEo3LWLoPntC",
		"572e4794":                         "3EFU7m",
		"ecac89cad93923c02321":             "EJDM8drfXA6uyA",
		"10c8511e":                         "Rt5zm",
		"00000000000000000000":             "1111111111",
		"000001":                           "112",
		hex.EncodeToString(goldenID[:]):    "EinDm6PZoghYgBNeYjwpY7",
		"00000000000000000000000000000000": "1111111111111111",
		"ffffffffffffffffffffffffffffffff": "YcVfxkQb6JRzqk5kF2tNLv",
	} {
		b, _ := hex.DecodeString(in)
		if got := base58(b); got != want {
			t.Errorf("base58(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestBase58MatchesBigInt checks the digit-array division against a
// big.Int one on random ids, with and without leading zeros.
func TestBase58MatchesBigInt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var id [16]byte
		for j := range id {
			id[j] = byte(r.Uint32())
		}
		for j := 0; j < i%4; j++ {
			id[j] = 0
		}
		if got, want := base58(id[:]), bigBase58(id[:]); got != want {
			t.Fatalf("base58(%x) = %s, want %s", id, got, want)
		}
	}
}

func bigBase58(b []byte) string {
	var out []byte
	n, mod, radix := new(big.Int).SetBytes(b), new(big.Int), big.NewInt(58)
	for n.Sign() > 0 {
		n.DivMod(n, radix, mod)
		out = append([]byte{b58Alphabet[mod.Int64()]}, out...)
	}
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append([]byte{'1'}, out...)
	}
	return string(out)
}

// TestSubjectsGolden pins the subjects of the reference's
// lib/velo/src/transports/nats/subjects.rs.
func TestSubjectsGolden(t *testing.T) {
	if got, want := InboundSubject("prod", goldenID), "prod.velo.EinDm6PZoghYgBNeYjwpY7"; got != want {
		t.Errorf("inbound subject %s, want %s", got, want)
	}
	if got, want := HealthSubject("prod", goldenID), "prod.velo.EinDm6PZoghYgBNeYjwpY7.health"; got != want {
		t.Errorf("health subject %s, want %s", got, want)
	}
	if got, want := InboundSubject("my.cluster.name", goldenID), "my.cluster.name.velo.EinDm6PZoghYgBNeYjwpY7"; got != want {
		t.Errorf("a dotted cluster id: %s, want %s", got, want)
	}
}
