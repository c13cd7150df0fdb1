package hub

import (
	"errors"
	"testing"

	"github.com/velo-go/velo/hub/protocol"
)

// FuzzAdmit feeds any bytes to the registration's decode-and-admit step,
// which is what the server adds on top of the protocol's decoder (the
// registration requirements, the extension names this hub has, each
// extension's Admit, the credential's form). It never panics, and every
// refusal is a protocol error with a client-side code.
func FuzzAdmit(f *testing.F) {
	f.Add([]byte(`{"peer":{"instance_id":"6f1c5ec5-8f39-4e2f-9d55-3a4a1f0c2b11","worker_address":[128]}}`), "")
	f.Add([]byte(`{"peer":{"instance_id":"6f1c5ec5-8f39-4e2f-9d55-3a4a1f0c2b11","worker_address":[128]},"extensions":{"services":{"names":["a","b"]}}}`), "x")
	f.Add([]byte(`{"extensions":{"services":null,"rec":1}}`), "")
	f.Add([]byte(`{"peer":null}`), string(protocol.NewCredential()))
	f.Add([]byte{0xff, '{'}, "")
	cfg := testConfig()
	cfg.RegistrationRequires = []string{"rec"}
	h, err := New(cfg, WithExtension(newRecorder("rec")))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, cred string) {
		_, err := h.admit(regRequest{body: body, cred: protocol.Credential(cred)})
		if err == nil {
			return
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			t.Fatalf("not a protocol error: %v", err)
		}
		switch pe.Code {
		case protocol.CodeBadRequest, protocol.CodeUnauthorized:
		default:
			t.Fatalf("admit answered %s", pe.Code)
		}
	})
}

// FuzzParseConfig: any bytes give a config that validates, or ErrConfig.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"heartbeat_interval_ms": 0}`))
	f.Add([]byte(`{"bundles": {"a": [1,2]}, "registration_requires": ["x"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error not ErrConfig: %v", err)
			}
			return
		}
		if c.Validate() != nil {
			t.Fatal("ParseConfig returned an invalid config")
		}
	})
}
