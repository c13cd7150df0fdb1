package hub

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// TestCredentialCompareHasNoEarlyExit: every credential compare goes
// through subtle.ConstantTimeCompare with both whole values, whether the
// forged credential differs in its first byte or its last, so its time
// does not tell how much of a guess was right.
func TestCredentialCompareHasNoEarlyExit(t *testing.T) {
	type seen struct{ a, b int }
	var calls []seen
	onCompare = func(na, nb int) { calls = append(calls, seen{na, nb}) }
	defer func() { onCompare = nil }()
	h, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	owner := ext.NewInstanceID()
	good := protocol.NewCredential()
	h.auth.put(owner, &grant{kind: grantLive, lease: Lease{Incarnation: 1, Epoch: 1}, cred: credOf(good)})
	flip := func(i int) protocol.Credential {
		b := []byte(good)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return protocol.Credential(b)
	}
	for _, c := range []protocol.Credential{flip(0), flip(len(good) - 1), good} {
		calls = nil
		_, err := h.auth.Authorize(owner, c)
		if len(calls) != 1 || calls[0].a != len(good) || calls[0].b != len(good) {
			t.Fatalf("compare calls %+v for a credential of %d bytes (err %v)", calls, len(good), err)
		}
	}
}

// TestSlowLorisIsCut: a client that sends part of a request's headers and
// stops is disconnected after the header timeout, and the hub serves
// others meanwhile.
func TestSlowLorisIsCut(t *testing.T) {
	tm := defaultTiming()
	tm.readHeader = 100 * time.Millisecond
	h := startHub(t, testConfig(), withTiming(tm))
	c, err := net.Dial("tcp", h.ControlAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /v1/health HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	if st, _ := call(t, "GET", ctl(h)+protocol.PathHealth, nil, ""); st != 200 {
		t.Fatalf("health while a slow client holds a connection: %d", st)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = bufio.NewReader(c).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the hub kept the slow client's connection open")
	}
}

// TestCredentialWordCompare: the word compare of a live credential finds
// a difference in any byte of the text, and accepts only the same text.
func TestCredentialWordCompare(t *testing.T) {
	good := protocol.NewCredential()
	g := &grant{kind: grantLive, cred: credOf(good)}
	if !sameCredential(g, good) {
		t.Fatal("the credential itself is refused")
	}
	for i := range len(good) {
		b := []byte(good)
		b[i] ^= 0x01
		if sameCredential(g, protocol.Credential(b)) {
			t.Fatalf("a credential that differs in byte %d is accepted", i)
		}
	}
	if sameCredential(g, good[:len(good)-1]) || sameCredential(g, good+"A") {
		t.Fatal("a credential of another length is accepted")
	}
}
