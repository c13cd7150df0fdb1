package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/hub/protocol"
)

// viaProxy is a node and a client whose control requests go through p.
func viaProxy(t *testing.T, h *hub.Hub, p *lossyProxy) (*velo.Node, *client.HubClient) {
	t.Helper()
	hc, err := client.New(client.Config{URL: p.URL(), PublicURL: pubURL(h), Logger: quiet, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	node, err := velo.New(context.Background(), append(hc.NodeOptions(), tcpOpt(t), velo.WithLogger(quiet))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		node.Shutdown(ctx)
		hc.Close()
	})
	return node, hc
}

// probe asks the hub to probe id now and returns what the handler said.
func probe(t *testing.T, h *hub.Hub, node *velo.Node) protocol.ProbeResponse {
	t.Helper()
	resp, err := http.Post(ctlURL(h)+protocol.ProbePath(node.InstanceID()), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pr protocol.ProbeResponse
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&pr) != nil {
		t.Fatalf("probe: %d", resp.StatusCode)
	}
	return pr
}

// TestLostRegistrationAnswer: the hub commits a registration whose answer
// is lost. The client holds nothing, so its handler answers ok: false;
// a retry without a credential is refused unauthorized (the hub holds a
// registration nobody has), after which the handler stays not ok even
// during the retries; the hub's probes free the entry and a retry gets in.
func TestLostRegistrationAnswer(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig())
	p := newLossyProxy(t, ctlURL(h))
	node, hc := viaProxy(t, h, p)
	p.setRule(once("drop", isRegister))
	err := hc.Register(ctx, node)
	var na *client.NoAnswerError
	if !errors.As(err, &na) {
		t.Fatalf("register with the answer lost: %v", err)
	}
	if hc.IsRegistered() {
		t.Fatal("registered without an answer")
	}
	e, ok := h.Store().LookupInstance(node.InstanceID())
	if !ok {
		t.Fatal("the hub did not commit the registration whose answer was lost")
	}
	if pr := probe(t, h, node); pr.OK {
		t.Fatal("the handler answered ok for a registration the client does not hold")
	}
	if err := hc.Register(ctx, node); !errors.Is(err, protocol.CodeUnauthorized) {
		t.Fatalf("retry while the hub holds the lost registration: %v", err)
	}
	var regErr error
	eventually(t, "a retry to get in once the probes freed the entry", func() bool {
		regErr = hc.Register(ctx, node)
		return regErr == nil
	})
	if !hc.IsRegistered() || hc.Epoch() <= e.Epoch {
		t.Fatalf("after the retry: registered %v, epoch %d (lost one %d)", hc.IsRegistered(), hc.Epoch(), e.Epoch)
	}
	if pr := probe(t, h, node); !pr.OK {
		t.Fatalf("the handler refuses the registration it holds: %s", pr.Error)
	}
}

// TestReRegistrationFailsClosed: a re-registration that gets no answer
// (the connection drops after the hub acted, or a proxy answers 502)
// drops the registration held; the next register starts without a
// credential and gets in once the hub freed the one nobody holds.
func TestReRegistrationFailsClosed(t *testing.T) {
	ctx := context.Background()
	for _, action := range []string{"drop", "502"} {
		t.Run(action, func(t *testing.T) {
			h := startHub(t, hubConfig())
			p := newLossyProxy(t, ctlURL(h))
			node, hc := viaProxy(t, h, p)
			if err := hc.Register(ctx, node); err != nil {
				t.Fatal(err)
			}
			p.setRule(once(action, isRegister))
			err := hc.Register(ctx, node)
			var na *client.NoAnswerError
			if !errors.As(err, &na) {
				t.Fatalf("re-registration without an answer: %v", err)
			}
			if hc.IsRegistered() {
				t.Fatal("the client kept a registration whose credential the hub may have rotated")
			}
			if pr := probe(t, h, node); pr.OK {
				t.Fatal("the handler answers ok after failing closed")
			}
			eventually(t, "a fresh registration", func() bool { return hc.Register(ctx, node) == nil })
		})
	}
}

// TestUnauthorizedDropsRegistration: the hub refusing the credential on
// any call (here an extension control call after the entry was replaced
// behind the client's back) drops the registration, so IsRegistered
// tells the truth and extension calls answer ErrNotRegistered.
func TestUnauthorizedDropsRegistration(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig(), hub.WithExtension(&counter{}))
	node, hc := join(t, h)
	twin, err := hc.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close()
	// Another client of the same instance takes the registration over
	// the hub: it has no credential, so first the entry must go.
	e, _ := h.Store().LookupInstance(node.InstanceID())
	if err := h.Store().Remove(ctx, node.InstanceID(), e.Incarnation); err != nil {
		t.Fatal(err)
	}
	other, err := client.New(client.Config{URL: ctlURL(h), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	eventually(t, "the other client to register", func() bool { return other.RegisterPeer(ctx, node.PeerInfo()) == nil })
	x, _ := hc.Ext("counter")
	path := "add/" + node.InstanceID().String()
	err = x.ControlPost(ctx, path, addReq{By: 1}, nil)
	if !errors.Is(err, protocol.CodeUnauthorized) {
		t.Fatalf("control call with a replaced credential: %v", err)
	}
	var he *client.HubError
	if !errors.As(err, &he) || he.HTTPStatus() != 401 {
		t.Fatalf("not a HubError: %v", err)
	}
	if hc.IsRegistered() || twin.IsRegistered() {
		t.Fatal("unauthorized left the registration held (clones share it)")
	}
	if err := x.ControlPost(ctx, path, addReq{By: 1}, nil); !errors.Is(err, client.ErrNotRegistered) {
		t.Fatalf("control call without a registration: %v", err)
	}
	if err := hc.Unregister(ctx); !errors.Is(err, client.ErrNotRegistered) {
		t.Fatalf("unregister without a registration: %v", err)
	}
}

// TestLastCloseUnregisters: closing a clone keeps the registration;
// closing the last handle sends DELETE, and the hub's entry is gone
// before Close returns. The closed handle refuses further calls.
func TestLastCloseUnregisters(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig())
	hc, err := client.New(client.Config{URL: ctlURL(h), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	node, err := velo.New(ctx, append(hc.NodeOptions(), tcpOpt(t), velo.WithLogger(quiet))...)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown(ctx)
	if err := hc.Register(ctx, node); err != nil {
		t.Fatal(err)
	}
	c2, err := hc.Clone()
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Store().LookupInstance(node.InstanceID()); !ok {
		t.Fatal("closing one of two handles unregistered")
	}
	if err := hc.Register(ctx, node); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("register on a closed handle: %v", err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Store().LookupInstance(node.InstanceID()); ok {
		t.Fatal("the last Close did not unregister")
	}
	if a := askHeartbeat(t, node); a.OK {
		t.Fatal("a closed client's handler answers ok")
	}
}

// askHeartbeat calls node's heartbeat handler from a node of its own, as
// a hub would.
func askHeartbeat(t *testing.T, node *velo.Node) protocol.HeartbeatAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	asker, err := velo.New(ctx, tcpOpt(t), velo.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer asker.Shutdown(ctx)
	if err := asker.RegisterPeer(node.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(protocol.HeartbeatProbe{HubID: protocol.NewHubID(), Instance: node.InstanceID(), Epoch: 1})
	b, err := asker.Unary(ctx, node.InstanceID(), protocol.HeartbeatHandler, body)
	if err != nil {
		t.Fatal(err)
	}
	var a protocol.HeartbeatAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}
