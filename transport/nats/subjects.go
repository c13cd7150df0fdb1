package nats

import "github.com/velo-go/velo/ext"

// The reference names a node's subjects after its instance id
// (lib/velo/src/transports/nats/subjects.rs):
//
//	inbound: {cluster}.velo.{base58(instance id)}
//	health:  {cluster}.velo.{base58(instance id)}.health
//
// Base58 keeps the id token free of '.', '*' and '>', which NATS reads as
// subject syntax.

// InboundSubject is the subject the instance id receives its frames on.
func InboundSubject(cluster string, id ext.InstanceID) string {
	return cluster + ".velo." + base58(id[:])
}

// HealthSubject is the request-reply subject that answers health checks
// for the instance id: the inbound subject with ".health" appended.
func HealthSubject(cluster string, id ext.InstanceID) string {
	return InboundSubject(cluster, id) + healthSuffix
}

const healthSuffix = ".health"

const b58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// base58 encodes b with the Bitcoin alphabet, as the bs58 crate does: the
// bytes as one big-endian number in base 58, with a '1' for each leading
// zero byte. It runs the schoolbook division on a digit array, so it
// needs no big.Int for the 16 bytes of an id.
func base58(b []byte) string {
	zeros := 0
	for zeros < len(b) && b[zeros] == 0 {
		zeros++
	}
	// log(256)/log(58) < 1.37: the digits of the rest fit in this many.
	digits := make([]byte, (len(b)-zeros)*137/100+1)
	n := 0 // digits in use, least significant first
	for _, c := range b[zeros:] {
		carry := int(c)
		for i := 0; i < n; i++ {
			carry += int(digits[i]) << 8
			digits[i] = byte(carry % 58)
			carry /= 58
		}
		for carry > 0 {
			digits[n] = byte(carry % 58)
			carry /= 58
			n++
		}
	}
	out := make([]byte, zeros+n)
	for i := 0; i < zeros; i++ {
		out[i] = '1'
	}
	for i := 0; i < n; i++ {
		out[zeros+i] = b58Alphabet[digits[n-1-i]]
	}
	return string(out)
}
