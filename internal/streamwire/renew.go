package streamwire

import "encoding/json"

// MaxRenewBatch is the most handles one _anchor_renew request carries. An
// owner refuses more.
const MaxRenewBatch = 256

// RenewRequest is the body of _anchor_renew. Go defines it: reference 0.9
// has no such handler. The handles are in their JSON form:
//
//	{"handles":[{"hi":N,"lo":N},...]}
//
// The answer is null, as for the other unit-answer handlers.
type RenewRequest struct {
	Handles []AnchorHandle
}

// AppendJSON appends the body; a nil list is written as [].
func (r *RenewRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"handles":[`...)
	for i, h := range r.Handles {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = h.AppendJSON(dst)
	}
	return append(dst, "]}"...)
}

// DecodeRenewRequest reads the body of _anchor_renew. handles is required,
// and holds at most MaxRenewBatch handles.
func DecodeRenewRequest(b []byte) (RenewRequest, error) {
	var r RenewRequest
	have := false
	err := jsonObject(b, "renew request", func(key string, val json.RawMessage) error {
		if key != "handles" {
			return nil
		}
		have = true
		var err error
		r.Handles, err = jsonHandles(val)
		return err
	})
	if err == nil && !have {
		err = malformed("renew request: missing handles")
	}
	if err != nil {
		return RenewRequest{}, err
	}
	return r, nil
}

func jsonHandles(val json.RawMessage) ([]AnchorHandle, error) {
	if len(val) == 0 || val[0] != '[' {
		return nil, malformed("handles: not a list")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(val, &raws); err != nil {
		return nil, malformed("handles: %v", err)
	}
	if len(raws) > MaxRenewBatch {
		return nil, malformed("handles: %d entries, at most %d", len(raws), MaxRenewBatch)
	}
	out := make([]AnchorHandle, len(raws))
	for i, raw := range raws {
		if err := out[i].UnmarshalJSON(raw); err != nil {
			return nil, err
		}
	}
	return out, nil
}
