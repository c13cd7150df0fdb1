package nats

import (
	"math/big"
	"strconv"

	"github.com/velo-go/velo/ext"
)

// InstanceSubject is the subject a registered instance answers on.
func InstanceSubject(cluster string, id ext.InstanceID) string {
	return cluster + ".velo.discover.instance." + base58(id[:])
}

// WorkerSubject is the subject a registered worker answers on.
func WorkerSubject(cluster string, w ext.WorkerID) string {
	return cluster + ".velo.discover.worker." + strconv.FormatUint(uint64(w), 10)
}

const b58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// base58 encodes with the Bitcoin alphabet; each leading zero byte
// becomes a '1'. Only 16 bytes go through it, so big.Int is fine.
func base58(b []byte) string {
	var out []byte
	n := new(big.Int).SetBytes(b)
	radix, mod := big.NewInt(58), new(big.Int)
	for n.Sign() > 0 {
		n.DivMod(n, radix, mod)
		out = append(out, b58Alphabet[mod.Int64()])
	}
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append(out, '1')
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return string(out)
}
