package messenger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/ext"
)

// TypedUnary sends req as JSON and decodes the JSON answer into Resp.
func TypedUnary[Resp any](ctx context.Context, m *Messenger, target ext.InstanceID, handler string, req any, opts ...CallOption) (Resp, error) {
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
