package client

import (
	"context"
	"strings"

	"github.com/velo-go/velo/hub/protocol"
)

// ExtClient makes JSON calls to one extension's routes, under
// /v1/ext/{name}/. Get and Post go to the public listener; ControlGet,
// ControlPost and ControlDelete go to the control listener with the
// registration's credential, and answer ErrNotRegistered without one
// (also once every handle of the client is closed). A bundle builds its
// typed client on it. Every error the hub answers is a *HubError with
// its ErrorCode; unauthorized and register_again drop the registration
// the client holds, as on any call.
type ExtClient struct {
	s    *state
	name string
}

// Ext returns the client of the extension called name.
func (c *HubClient) Ext(name string) (*ExtClient, error) {
	if err := protocol.ValidateExtensionName(name); err != nil {
		return nil, err
	}
	return &ExtClient{s: c.s, name: name}, nil
}

func (e *ExtClient) path(rest string) string {
	return protocol.ExtPath(e.name, strings.TrimPrefix(rest, "/"))
}

// Get decodes the answer of GET /v1/ext/{name}/{path} into out (nil: ignore it).
func (e *ExtClient) Get(ctx context.Context, path string, out any) error {
	return e.s.do(ctx, public, "ext "+e.name+" GET", "GET", e.path(path), "", nil, out)
}

// Post sends in as JSON and decodes the answer into out.
func (e *ExtClient) Post(ctx context.Context, path string, in, out any) error {
	return e.s.do(ctx, public, "ext "+e.name+" POST", "POST", e.path(path), "", in, out)
}

// ControlGet is Get on the control listener, with the credential.
func (e *ExtClient) ControlGet(ctx context.Context, path string, out any) error {
	return e.control(ctx, "GET", path, nil, out)
}

// ControlPost is Post on the control listener, with the credential.
func (e *ExtClient) ControlPost(ctx context.Context, path string, in, out any) error {
	return e.control(ctx, "POST", path, in, out)
}

// ControlDelete sends DELETE on the control listener, with the credential.
func (e *ExtClient) ControlDelete(ctx context.Context, path string, out any) error {
	return e.control(ctx, "DELETE", path, nil, out)
}

func (e *ExtClient) control(ctx context.Context, method, path string, in, out any) error {
	cred, _, err := e.s.credential()
	if err != nil {
		return err
	}
	err = e.s.do(ctx, control, "ext "+e.name+" "+method, method, e.path(path), cred, in, out)
	if err != nil {
		e.s.settle(err, false)
	}
	return err
}
