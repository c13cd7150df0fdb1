package hub

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// TestRegistrationRoutes walks the core routes' happy paths and the
// credential rules: each registration rotates the credential, the old one
// answers unauthorized, a forged one too, and a registration without the
// credential of a live registration is refused.
func TestRegistrationRoutes(t *testing.T) {
	h := startHub(t, testConfig())
	p := fakePeer()
	r1 := register(t, h, p, "", nil)
	if r1.HubID != h.ID() || r1.Epoch == 0 || !r1.Credential.Valid() {
		t.Fatalf("register answer: %+v", r1)
	}
	hb := ctl(h) + protocol.HeartbeatPath(p.InstanceID)
	if st, b := call(t, "POST", hb, nil, r1.Credential); st != http.StatusOK {
		t.Fatalf("heartbeat: %d %s", st, b)
	}
	forged := protocol.NewCredential()
	st, b := call(t, "POST", hb, nil, forged)
	wantCode(t, "forged credential", st, b, protocol.CodeUnauthorized, 401)
	st, b = call(t, "POST", hb, nil, "not-a-credential")
	wantCode(t, "malformed credential", st, b, protocol.CodeUnauthorized, 401)
	st, b = call(t, "POST", hb, nil, "")
	wantCode(t, "no credential", st, b, protocol.CodeUnauthorized, 401)

	// A registration without the credential of a live one is refused.
	st, b = call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), "")
	wantCode(t, "claim without credential", st, b, protocol.CodeUnauthorized, 401)
	st, b = call(t, "POST", ctl(h)+protocol.PathInstances, regBody(t, p, nil), forged)
	wantCode(t, "claim with a forged credential", st, b, protocol.CodeUnauthorized, 401)

	r2 := register(t, h, p, r1.Credential, nil)
	if r2.Epoch <= r1.Epoch || r2.Credential == r1.Credential {
		t.Fatalf("re-registration: %+v after %+v", r2, r1)
	}
	st, b = call(t, "POST", hb, nil, r1.Credential)
	wantCode(t, "replayed old credential", st, b, protocol.CodeUnauthorized, 401)
	if st, b := call(t, "POST", hb, nil, r2.Credential); st != http.StatusOK {
		t.Fatalf("heartbeat with the new credential: %d %s", st, b)
	}

	for _, base := range []string{pub(h), ctl(h)} {
		st, b := call(t, "GET", base+protocol.PeerByInstancePath(p.InstanceID), nil, "")
		var got ext.PeerInfo
		if st != 200 || json.Unmarshal(b, &got) != nil || got.InstanceID != p.InstanceID {
			t.Fatalf("peer by instance: %d %s", st, b)
		}
		st, b = call(t, "GET", base+protocol.PeerByWorkerPath(p.WorkerID()), nil, "")
		if st != 200 || json.Unmarshal(b, &got) != nil || got.InstanceID != p.InstanceID {
			t.Fatalf("peer by worker: %d %s", st, b)
		}
		st, b = call(t, "GET", base+protocol.PathInstances, nil, "")
		var list protocol.InstanceList
		if st != 200 || json.Unmarshal(b, &list) != nil || len(list.Instances) != 1 || list.Instances[0].Epoch != r2.Epoch {
			t.Fatalf("list: %d %s", st, b)
		}
		st, b = call(t, "GET", base+protocol.PathHealth, nil, "")
		var health protocol.Health
		if st != 200 || json.Unmarshal(b, &health) != nil || health.Status != "ok" || health.Store != "live" {
			t.Fatalf("health: %d %s", st, b)
		}
		st, b = call(t, "GET", base+protocol.PathHub, nil, "")
		var info protocol.HubInfo
		if st != 200 || json.Unmarshal(b, &info) != nil || info.HubID != h.ID() || len(info.Extensions) != 0 {
			t.Fatalf("hub info (the built-in services is not listed): %d %s", st, b)
		}
	}

	// The public listener has no mutations.
	st, b = call(t, "POST", pub(h)+protocol.PathInstances, regBody(t, fakePeer(), nil), "")
	wantCode(t, "register on the public listener", st, b, protocol.CodeMethodNotAllowed, 405)
	st, b = call(t, "POST", pub(h)+protocol.HeartbeatPath(p.InstanceID), nil, r2.Credential)
	wantCode(t, "heartbeat on the public listener", st, b, protocol.CodeNotFound, 404)

	// Unregister: the old credential cannot, the current one can.
	del := ctl(h) + protocol.InstancePath(p.InstanceID)
	st, b = call(t, "DELETE", del, nil, r1.Credential)
	wantCode(t, "unregister with the old credential", st, b, protocol.CodeUnauthorized, 401)
	if st, b := call(t, "DELETE", del, nil, r2.Credential); st != http.StatusNoContent {
		t.Fatalf("unregister: %d %s", st, b)
	}
	st, b = call(t, "GET", pub(h)+protocol.PeerByInstancePath(p.InstanceID), nil, "")
	wantCode(t, "peer after unregister", st, b, protocol.CodeNotFound, 404)
	st, b = call(t, "POST", hb, nil, r2.Credential)
	wantCode(t, "heartbeat after unregister", st, b, protocol.CodeNotFound, 404)
	// The instance can register fresh again.
	register(t, h, p, "", nil)
}

// TestBadInputErrorBodies: every error a core route answers is an
// ErrorBody with a stable code, also for a route that does not exist, a
// wrong method, a body the hub cannot parse, and one too long.
func TestBadInputErrorBodies(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBodyBytes = 4096
	h := startHub(t, cfg)
	p := fakePeer()
	r := register(t, h, p, "", nil)
	big := []byte(`{"peer":` + strings.Repeat(" ", 5000) + `}`)
	cases := []struct {
		name, method, url string
		body              []byte
		cred              protocol.Credential
		code              protocol.ErrorCode
		status            int
	}{
		{"unknown route", "GET", ctl(h) + "/v1/nothing", nil, "", protocol.CodeNotFound, 404},
		{"root of the control listener (the page is on the public one)", "GET", ctl(h) + "/", nil, "", protocol.CodeNotFound, 404},
		{"wrong method", "PUT", ctl(h) + protocol.PathHealth, nil, "", protocol.CodeMethodNotAllowed, 405},
		{"unparseable register", "POST", ctl(h) + protocol.PathInstances, []byte("{not json"), "", protocol.CodeBadRequest, 400},
		{"register with trailing data", "POST", ctl(h) + protocol.PathInstances, append(regBody(t, fakePeer(), nil), []byte("{}")...), "", protocol.CodeBadRequest, 400},
		{"register without peer", "POST", ctl(h) + protocol.PathInstances, []byte(`{}`), "", protocol.CodeBadRequest, 400},
		{"oversized register", "POST", ctl(h) + protocol.PathInstances, big, "", protocol.CodePayloadTooLarge, 413},
		{"unknown extension payload", "POST", ctl(h) + protocol.PathInstances, regBody(t, fakePeer(), map[string]any{"nope": 1}), "", protocol.CodeBadRequest, 400},
		{"bad service name in payload", "POST", ctl(h) + protocol.PathInstances, regBody(t, fakePeer(), map[string]any{"services": map[string]any{"names": []string{".."}}}), "", protocol.CodeBadRequest, 400},
		{"bad instance id", "POST", ctl(h) + "/v1/instances/xyz/heartbeat", nil, r.Credential, protocol.CodeBadRequest, 400},
		{"bad worker id", "GET", pub(h) + "/v1/peers/worker/12", nil, "", protocol.CodeBadRequest, 400},
		{"unknown peer", "GET", pub(h) + protocol.PeerByInstancePath(ext.NewInstanceID()), nil, "", protocol.CodeNotFound, 404},
		{"oversized heartbeat", "POST", ctl(h) + protocol.HeartbeatPath(p.InstanceID), make([]byte, protocol.MaxSmallBody+1), r.Credential, protocol.CodePayloadTooLarge, 413},
		{"probe without velo", "POST", ctl(h) + protocol.ProbePath(p.InstanceID), nil, "", protocol.CodeUnavailable, 503},
		{"bad service name", "GET", pub(h) + "/v1/services/a%2Fb", nil, "", protocol.CodeBadRequest, 400},
		{"long service name", "GET", pub(h) + "/v1/services/" + strings.Repeat("a", 129), nil, "", protocol.CodeBadRequest, 400},
		{"service put without credential", "PUT", ctl(h) + protocol.ServiceInstancePath("svc", p.InstanceID), nil, "", protocol.CodeUnauthorized, 401},
		{"service put with forged credential", "PUT", ctl(h) + protocol.ServiceInstancePath("svc", p.InstanceID), nil, protocol.NewCredential(), protocol.CodeUnauthorized, 401},
		{"service put on public", "PUT", pub(h) + protocol.ServiceInstancePath("svc", p.InstanceID), nil, r.Credential, protocol.CodeNotFound, 404},
		{"unregister unknown", "DELETE", ctl(h) + protocol.InstancePath(ext.NewInstanceID()), nil, protocol.NewCredential(), protocol.CodeNotFound, 404},
		{"extension route unknown", "GET", pub(h) + "/v1/ext/none/x", nil, "", protocol.CodeNotFound, 404},
	}
	for _, c := range cases {
		st, b := call(t, c.method, c.url, c.body, c.cred)
		wantCode(t, c.name, st, b, c.code, c.status)
	}
	// Bad input changed nothing: the registration still holds.
	if st, b := call(t, "POST", ctl(h)+protocol.HeartbeatPath(p.InstanceID), nil, r.Credential); st != 200 {
		t.Fatalf("heartbeat after bad input: %d %s", st, b)
	}
}
