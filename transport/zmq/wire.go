package zmq

import (
	"net"
	"strings"
	"unicode/utf8"

	"github.com/velo-go/velo/ext"
)

// The parts of one frame on the wire, as the reference sends them from a
// DEALER: the type byte, the velo header, the payload. A ROUTER receives
// the sender's identity in front of them.
const dealerParts = 3

// typeBytes are the one-byte type parts, made once so a send allocates
// none for them.
var typeBytes = func() (v [ext.NumMessageTypes][]byte) {
	for i := range v {
		v[i] = []byte{byte(i)}
	}
	return v
}()

// frameParts returns the multipart message a DEALER sends for f.
func frameParts(f ext.Frame) [][]byte {
	return [][]byte{typeBytes[f.Type], f.Header, f.Payload}
}

// echoParts is what a ROUTER sends back to the sender's identity (on the
// connection the request came on) for a request refused while draining:
// ShuttingDown with the request's header and no payload.
func echoParts(header []byte) [][]byte {
	return [][]byte{typeBytes[ext.ShuttingDown], header, {}}
}

// parseParts reads [type, header, payload]; ok is false for anything else:
// another number of parts, a type part that is not one byte, an unknown
// type, or header plus payload above max.
func parseParts(parts [][]byte, max int) (f ext.Frame, ok bool) {
	if len(parts) != dealerParts || len(parts[0]) != 1 {
		return f, false
	}
	t := ext.MessageType(parts[0][0])
	if !t.Valid() || len(parts[1])+len(parts[2]) > max {
		return f, false
	}
	return ext.Frame{Type: t, Header: parts[1], Payload: parts[2]}, true
}

// Identity is the DEALER identity of lane on instance id: the 16 bytes of
// the id, as the reference sets it (it keeps one DEALER per peer), and for
// lanes past the first the lane number as a 17th byte, so that a ROUTER,
// which routes replies by identity, tells a node's lanes apart.
func Identity(id ext.InstanceID, lane int) []byte {
	b := append([]byte(nil), id[:]...)
	if lane > 0 {
		b = append(b, byte(lane))
	}
	return b
}

// validEndpoint reports whether s is an endpoint a peer can dial: valid
// UTF-8 and tcp:// or ipc://, as the reference accepts (inproc:// needs a
// context the peers share).
func validEndpoint(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	rest, ok := strings.CutPrefix(s, "tcp://")
	if !ok {
		rest, ok = strings.CutPrefix(s, "ipc://")
	}
	return ok && rest != ""
}

// boundEndpoint is the endpoint to advertise for a listener bound to
// listen: a tcp port 0 resolved to the port the kernel picked.
func boundEndpoint(listen string, addr net.Addr) string {
	if strings.HasPrefix(listen, "tcp://") && addr != nil {
		return "tcp://" + addr.String()
	}
	return listen
}
