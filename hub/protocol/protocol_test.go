package protocol_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

func TestErrorMatchesByCode(t *testing.T) {
	err := fmt.Errorf("register: %w", protocol.Errorf(protocol.CodeBusy, "owner %d busy", 1))
	if !errors.Is(err, protocol.CodeBusy) {
		t.Fatal("errors.Is(err, CodeBusy) = false")
	}
	if errors.Is(err, protocol.CodeRegisterAgain) {
		t.Fatal("a busy error matched register_again")
	}
	if !errors.Is(err, &protocol.Error{Code: protocol.CodeBusy}) {
		t.Fatal("errors.Is with an *Error target of the same code = false")
	}
}

func TestWriteAndParseErrorRoundTrip(t *testing.T) {
	rec := httptest.NewRecorder()
	protocol.WriteError(rec, fmt.Errorf("wrapped: %w", protocol.Errorf(protocol.CodeRecovered, "hub restarted")))
	if rec.Code != 409 {
		t.Fatalf("status %d, want 409", rec.Code)
	}
	got := protocol.ParseError(rec.Code, rec.Body.Bytes())
	if got.Code != protocol.CodeRecovered || got.Message != "hub restarted" {
		t.Fatalf("parsed %+v", got)
	}
	// A plain error must not leak its text.
	rec = httptest.NewRecorder()
	protocol.WriteError(rec, errors.New("secret db path"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("plain error answered %d %q", rec.Code, rec.Body.String())
	}
	// A proxy page has no code.
	if e := protocol.ParseError(502, []byte("<html>bad gateway</html>")); e.Code != "" || e.HTTPStatus() != 502 {
		t.Fatalf("proxy page parsed as %+v", e)
	}
}

func TestEveryCodeHasAStatus(t *testing.T) {
	codes := map[protocol.ErrorCode]int{
		protocol.CodeBadRequest: 400, protocol.CodePayloadTooLarge: 413, protocol.CodeUnauthorized: 401,
		protocol.CodeNotFound: 404, protocol.CodeMethodNotAllowed: 405, protocol.CodeBusy: 409,
		protocol.CodeRegisterAgain: 409, protocol.CodeRecovered: 409, protocol.CodeUnavailable: 503,
		protocol.CodeInternal: 500,
	}
	for c, want := range codes {
		if c.Status() != want {
			t.Errorf("%s: status %d, want %d", c, c.Status(), want)
		}
	}
}

func TestServiceNames(t *testing.T) {
	good := []string{"a", "A.b_c-9", strings.Repeat("x", 128), "...", ".a", "a..b"}
	bad := []string{"", ".", "..", strings.Repeat("x", 129), "a/b", "a b", "é", "a%2f", "a?b", "a\x00"}
	for _, n := range good {
		if err := protocol.ValidateServiceName(n); err != nil {
			t.Errorf("%q refused: %v", n, err)
		}
	}
	for _, n := range bad {
		err := protocol.ValidateServiceName(n)
		if !errors.Is(err, protocol.CodeBadRequest) {
			t.Errorf("%q: err %v, want bad_request", n, err)
		}
	}
}

func TestExtensionNames(t *testing.T) {
	for _, n := range []string{"services", "kv_store", "a-1"} {
		if err := protocol.ValidateExtensionName(n); err != nil {
			t.Errorf("%q refused: %v", n, err)
		}
	}
	for _, n := range []string{"", "Kv", "a.b", "a/b", "..", strings.Repeat("a", 65)} {
		if err := protocol.ValidateExtensionName(n); !errors.Is(err, protocol.CodeBadRequest) {
			t.Errorf("%q: err %v, want bad_request", n, err)
		}
	}
}

func TestPaths(t *testing.T) {
	id, _ := ext.ParseInstanceID("0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b")
	cases := map[string]string{
		protocol.InstancePath(id):               "/v1/instances/0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b",
		protocol.HeartbeatPath(id):              "/v1/instances/0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b/heartbeat",
		protocol.ProbePath(id):                  "/v1/instances/0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b/probe",
		protocol.PeerByInstancePath(id):         "/v1/peers/instance/0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b",
		protocol.PeerByWorkerPath(0xab):         "/v1/peers/worker/00000000000000ab",
		protocol.WatchServicePath("llm"):        "/v1/services/llm/watch",
		protocol.ServiceInstancePath("llm", id): "/v1/services/llm/instances/0d8f4b3c-6f1e-4a59-9a2b-3c4d5e6f7a8b",
		protocol.ExtPath("kv", "items"):         "/v1/ext/kv/items",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	w, err := protocol.ParseWorkerID("00000000000000ab")
	if err != nil || w != 0xab {
		t.Fatalf("ParseWorkerID = %v, %v", w, err)
	}
	for _, s := range []string{"ab", "+000000000000000ab"[:16], "0x000000000000ab", "000000000000000g"} {
		if _, err := protocol.ParseWorkerID(s); !errors.Is(err, protocol.CodeBadRequest) {
			t.Errorf("ParseWorkerID(%q) err %v", s, err)
		}
	}
}

func TestCredential(t *testing.T) {
	a, b := protocol.NewCredential(), protocol.NewCredential()
	if !a.Valid() || a == b || len(a) != 43 {
		t.Fatalf("credentials %d chars, valid %v, equal %v", len(a), a.Valid(), a == b)
	}
	if protocol.Credential("short").Valid() || protocol.Credential(strings.Repeat("*", 43)).Valid() {
		t.Fatal("a malformed credential is valid")
	}
	if !a.Digest().Equal(a.Digest()) || a.Digest().Equal(b.Digest()) {
		t.Fatal("digest equality is wrong")
	}
	if s := fmt.Sprintf("%v %s %#v", a, a, a); strings.Contains(s, string(a)) {
		t.Fatalf("formatting leaks the credential: %s", s)
	}
}
