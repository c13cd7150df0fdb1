package nats

import (
	"math/big"
	"strconv"
	"strings"

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

// ServiceSubject is the subject every instance of service answers on: a
// request there gets one reply per live instance, its id as text.
func ServiceSubject(cluster, service string) string {
	return cluster + ".velo.service." + subjectToken(service) + ".list"
}

// ServiceEventSubject carries "+<id>" when an instance joins service and
// "-<id>" when it leaves in order (a killed one says nothing; watches
// find it gone by asking again).
func ServiceEventSubject(cluster, service string) string {
	return cluster + ".velo.service." + subjectToken(service) + ".events"
}

// ServicesSubject is where every registration answers with its service's
// name, for ListServices.
func ServicesSubject(cluster string) string { return cluster + ".velo.services" }

// subjectToken makes a service name one subject token: bytes other than
// letters, digits, '-' and '_' become %XX, so that '.', '*', '>' and
// spaces cannot split or widen a subject.
func subjectToken(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
