package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/hub/protocol"
)

// counter is a test extension: a public GET of its count, and a control
// POST, under the caller's credential, that adds to it.
type counter struct {
	hub.BaseExtension
	n int
}

func (c *counter) Name() string { return "counter" }

type addReq struct {
	By int `json:"by"`
}

type countResp struct {
	N int `json:"n"`
}

func (c *counter) PublicRoutes(r *hub.Routes) {
	r.HandleFunc("GET /count", func(w http.ResponseWriter, _ *http.Request) {
		hub.WriteJSON(w, http.StatusOK, countResp{c.n})
	})
}

func (c *counter) ControlRoutes(r *hub.Routes) {
	r.HandleFunc("POST /add/{id}", func(w http.ResponseWriter, req *http.Request) {
		if _, _, err := r.Authorized(req); err != nil {
			protocol.WriteError(w, err)
			return
		}
		var a addReq
		if err := r.DecodeJSON(req, &a); err != nil {
			protocol.WriteError(w, err)
			return
		}
		c.n += a.By
		hub.WriteJSON(w, http.StatusOK, countResp{c.n})
	})
}

// TestExtCalls: public and control JSON calls reach an extension's
// routes; a hub error comes back as a HubError with its code.
func TestExtCalls(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig(), hub.WithExtension(&counter{}))
	node, hc := join(t, h)
	x, err := hc.Ext("counter")
	if err != nil {
		t.Fatal(err)
	}
	var got countResp
	if err := x.ControlPost(ctx, "add/"+node.InstanceID().String(), addReq{By: 3}, &got); err != nil || got.N != 3 {
		t.Fatalf("control post: %+v, %v", got, err)
	}
	if err := x.Get(ctx, "count", &got); err != nil || got.N != 3 {
		t.Fatalf("public get: %+v, %v", got, err)
	}
	err = x.Post(ctx, "count", nil, nil)
	var he *client.HubError
	if !errors.As(err, &he) || he.Code != protocol.CodeMethodNotAllowed || !errors.Is(err, protocol.CodeMethodNotAllowed) {
		t.Fatalf("wrong method: %v", err)
	}
	if !hc.IsRegistered() {
		t.Fatal("a method_not_allowed answer dropped the registration")
	}
	if _, err := hc.Ext("Bad/Name"); !errors.Is(err, protocol.CodeBadRequest) {
		t.Fatalf("bad extension name: %v", err)
	}
}
