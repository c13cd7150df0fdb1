package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/transport/tcp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestRestartOnEmbeddedEtcdRecovers runs velo-hub on an embedded etcd,
// registers two registrants (a HubClient node, and one speaking the raw
// protocol so the test holds its credential), stops the hub with SIGTERM
// (exit 0, every port free), and starts it again on the same data
// directory: the old credential answers `recovered`, a registration
// presenting it recovers the instance, and the HubClient recovers by
// itself with its service.
func TestRestartOnEmbeddedEtcdRecovers(t *testing.T) {
	addrs := freeAddrs(t, 3)
	pub, ctl, veloAddr := addrs[0], addrs[1], addrs[2]
	cfg := writeConfig(t, hubJSON(pub, ctl, veloAddr, 1000))
	data := t.TempDir()
	args := []string{"--config", cfg, "--embedded-etcd", data}

	p1, serving := startProc(t, args...)
	if serving["store"] != "etcd" || serving["public"] != pub || serving["control"] != ctl {
		t.Fatalf("serving line %v", serving)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, hc, err := client.JoinWith(ctx, client.Config{URL: "http://" + ctl, Logger: quiet, RetryInterval: 100 * time.Millisecond},
		tcpOption(t), velo.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	defer node.Shutdown(context.Background())
	if _, err := hc.RegisterService(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	epoch1, hub1 := hc.Epoch(), hc.HubID()
	raw := newRawRegistrant(t, ctx, ctl)
	first, err := raw.register(ctx, false)
	if err != nil {
		t.Fatal(err)
	}

	if code := p1.stop(t); code != 0 {
		t.Fatalf("velo-hub exited %d after SIGTERM, want 0", code)
	}
	portsFree(t, pub, ctl, veloAddr)

	startProc(t, args...)
	raw.learnHub(t, ctx, pub) // so its node answers the new hub's probes
	if err := raw.heartbeat(ctx); !errors.Is(err, protocol.CodeRecovered) {
		t.Fatalf("the old credential after the restart: %v, want recovered", err)
	}
	again, err := raw.register(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Recovered || again.Epoch <= first.Epoch || again.HubID == first.HubID {
		t.Fatalf("re-registration with the credential: %+v (first %+v)", again, first)
	}
	if err := raw.heartbeat(ctx); err != nil {
		t.Fatalf("the recovered credential: %v", err)
	}

	// The HubClient learns of the restart from the new hub's probe and
	// registers again presenting its credential, carrying its service.
	for !(hc.IsRegistered() && hc.Recovered() && hc.HubID() != hub1) {
		select {
		case <-ctx.Done():
			t.Fatalf("the HubClient did not recover: registered %v, recovered %v", hc.IsRegistered(), hc.Recovered())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if hc.Epoch() <= epoch1 {
		t.Fatalf("epoch after recovery %d, before %d", hc.Epoch(), epoch1)
	}
	var members protocol.ServiceInstances
	getJSON(t, ctx, "http://"+pub+protocol.ServicePath("kept"), &members)
	if len(members.Instances) != 1 || members.Instances[0] != node.InstanceID() {
		t.Fatalf("service kept after recovery: %+v", members)
	}
}

func tcpOption(t *testing.T) velo.Option {
	tr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	return velo.WithTransport(tr)
}

// rawRegistrant registers a velo node over plain HTTP and answers the
// hub's probes itself, holding the credential where the test sees it.
type rawRegistrant struct {
	node  *velo.Node
	ctl   string
	cred  protocol.Credential
	epoch protocol.Epoch
}

func newRawRegistrant(t *testing.T, ctx context.Context, ctl string) *rawRegistrant {
	node, err := velo.New(ctx, tcpOption(t), velo.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown(context.Background()) })
	err = node.Register(velo.UnaryHandler(protocol.HeartbeatHandler, func(c *velo.Context) ([]byte, error) {
		var p protocol.HeartbeatProbe
		if err := json.Unmarshal(c.Payload, &p); err != nil {
			return nil, err
		}
		return json.Marshal(protocol.HeartbeatAnswer{OK: true, HubID: p.HubID})
	}))
	if err != nil {
		t.Fatal(err)
	}
	return &rawRegistrant{node: node, ctl: "http://" + ctl}
}

func (r *rawRegistrant) register(ctx context.Context, presentCredential bool) (protocol.RegisterResponse, error) {
	body, _ := json.Marshal(protocol.RegisterRequest{Peer: r.node.PeerInfo()})
	var out protocol.RegisterResponse
	err := r.do(ctx, protocol.PathInstances, body, presentCredential, &out)
	if err == nil {
		r.cred, r.epoch = out.Credential, out.Epoch
		if out.HubPeer != nil {
			err = r.node.RegisterPeer(*out.HubPeer)
		}
	}
	return out, err
}

func (r *rawRegistrant) heartbeat(ctx context.Context) error {
	var out protocol.HeartbeatResponse
	return r.do(ctx, protocol.HeartbeatPath(r.node.InstanceID()), nil, true, &out)
}

// learnHub registers the hub's velo peer, read from GET /v1/hub.
func (r *rawRegistrant) learnHub(t *testing.T, ctx context.Context, pub string) {
	var info protocol.HubInfo
	getJSON(t, ctx, "http://"+pub+protocol.PathHub, &info)
	if info.Peer == nil {
		t.Fatal("the hub names no velo peer")
	}
	if err := r.node.RegisterPeer(*info.Peer); err != nil {
		t.Fatal(err)
	}
}

// do POSTs body and decodes a 2xx answer into out, or returns the hub's
// ErrorBody as a *protocol.Error.
func (r *rawRegistrant) do(ctx context.Context, path string, body []byte, cred bool, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.ctl+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if cred {
		req.Header.Set(protocol.CredentialHeader, string(r.cred))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return protocol.ParseError(resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

func getJSON(t *testing.T, ctx context.Context, url string, out any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
