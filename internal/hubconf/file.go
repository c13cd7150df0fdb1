package hubconf

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/hub"
)

// File is a hub program's config file.
type File struct {
	// Hub is every top-level key but "store" and "velo": hub.Config, with
	// its defaults for the keys the file leaves out.
	Hub hub.Config
	// Store is the "store" section; without one, Kind is "memory".
	Store Store
	// Velo is the "velo" section.
	Velo Velo
}

// Velo configures the hub's velo node (TCP). Registrants dial it to
// answer the hub's probes (velo connections go one way), so it must be
// reachable from every registrant.
type Velo struct {
	// ListenAddr is the TCP address the node listens on. Empty: the
	// program's default.
	ListenAddr string `json:"listen_addr,omitempty"`
	// AdvertiseAddr is the host:port registrants dial, when it differs
	// from ListenAddr (NAT, a container, a DNS name). Empty: the
	// listener's address (every interface that is up for a wildcard).
	AdvertiseAddr string `json:"advertise_addr,omitempty"`
}

// Parse reads a config file. Unknown keys are refused, at the top level
// and in each section, with the key named; so are a second JSON value
// after the object and every value hub.Config.Validate or Store.Validate
// refuses. Every error matches hub.ErrConfig.
func Parse(b []byte) (File, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&top); err != nil {
		return File{}, fmt.Errorf("%w: %w", hub.ErrConfig, err)
	}
	if dec.More() {
		return File{}, fmt.Errorf("%w: trailing data after the config object", hub.ErrConfig)
	}
	if top == nil {
		return File{}, fmt.Errorf("%w: the config must be a JSON object", hub.ErrConfig)
	}
	var f File
	if err := section(top, "store", &f.Store); err != nil {
		return File{}, err
	}
	if err := section(top, "velo", &f.Velo); err != nil {
		return File{}, err
	}
	rest, err := json.Marshal(top)
	if err != nil {
		return File{}, fmt.Errorf("%w: %w", hub.ErrConfig, err)
	}
	if f.Hub, err = hub.ParseConfig(rest); err != nil {
		return File{}, err
	}
	f.Store.setDefaults()
	if err := f.Store.Validate(); err != nil {
		return File{}, err
	}
	return f, nil
}

// section decodes top[key] into v, refusing unknown keys, and deletes
// it from top so that hub.ParseConfig sees only its own keys.
func section(top map[string]json.RawMessage, key string, v any) error {
	raw, ok := top[key]
	if !ok {
		return nil
	}
	delete(top, key)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", hub.ErrConfig, key, err)
	}
	return nil
}
