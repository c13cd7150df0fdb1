package messenger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/ext"
)

// TypedUnary sends req as JSON and decodes the JSON answer into Resp.
func TypedUnary[Resp, Req any](ctx context.Context, m *Messenger, target ext.InstanceID, handler string, req Req, opts ...CallOption) (Resp, error) {
	var out Resp
	body, err := json.Marshal(req)
	if err != nil {
		return out, fmt.Errorf("velo: encode request for %q: %w", handler, err)
	}
	resp, err := m.Unary(ctx, target, handler, body, opts...)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return out, fmt.Errorf("velo: decode answer of %q: %w", handler, err)
	}
	return out, nil
}

// TypedUnaryAsync is TypedUnary without a waiting goroutine: req goes as
// JSON and done gets the answer decoded into Resp. done runs as for
// UnaryAsync: exactly once, on the goroutine that completes the call, and
// not at all when TypedUnaryAsync returns an error.
func TypedUnaryAsync[Resp, Req any](ctx context.Context, m *Messenger, target ext.InstanceID, handler string, req Req, done func(Resp, error), opts ...CallOption) error {
	if done == nil {
		return fmt.Errorf("velo: TypedUnaryAsync needs a callback")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("velo: encode request for %q: %w", handler, err)
	}
	return m.UnaryAsync(ctx, target, handler, body, func(resp []byte, err error) {
		var out Resp
		if err == nil {
			if uerr := json.Unmarshal(resp, &out); uerr != nil {
				err = fmt.Errorf("velo: decode answer of %q: %w", handler, uerr)
			}
		}
		done(out, err)
	}, opts...)
}
