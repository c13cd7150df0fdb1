package hub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Config is what a hub program decodes from its JSON file. Start from
// DefaultConfig (or ParseConfig): a field the file leaves out keeps its
// default, and one set to zero is refused by Validate, so that a typo'd
// zero cannot turn a timeout off.
type Config struct {
	// PublicAddr is the public listener (health, hub info, peer lookups,
	// service reads). Default ":1337".
	PublicAddr string `json:"public_addr"`
	// ControlAddr is the control listener: the public core routes plus
	// registration, unregistration, heartbeat, probe and service writes.
	// Default ":8337".
	ControlAddr string `json:"control_addr"`
	// HeartbeatIntervalMS is how often the hub probes each registrant
	// over velo; each probe times out after one interval. Default 10,000.
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms"`
	// HeartbeatMaxFailures probes failed in a row remove the registration.
	// Default 3.
	HeartbeatMaxFailures int `json:"heartbeat_max_failures"`
	// LockTimeoutMS bounds the wait for the registration lock; past it a
	// registration answers 503 busy. Default 5,000.
	LockTimeoutMS int64 `json:"lock_timeout_ms"`
	// StepTimeoutMS bounds each store call the hub awaits and each
	// extension step (prepare, on_registered). Default 5,000.
	StepTimeoutMS int64 `json:"step_timeout_ms"`
	// ShutdownTimeoutMS is the budget of each wait of Shutdown (see
	// docs/hub.md). Default 5,000.
	ShutdownTimeoutMS int64 `json:"shutdown_timeout_ms"`
	// RegistrantTTLMS is the liveness TTL the store applies to an entry
	// nobody touched (the in-memory store's reaper). Default 30,000.
	RegistrantTTLMS int64 `json:"registrant_ttl_ms"`
	// MaxBodyBytes bounds a request body; a larger one answers 413.
	// Default 1 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// RegistrationRequires names extensions whose payload every
	// registration must carry; one without it answers 400.
	RegistrationRequires []string `json:"registration_requires,omitempty"`
	// Bundles holds one section per bundle, bundles.{name}, which only
	// that bundle reads. A section no bundle owns is refused at startup.
	Bundles map[string]json.RawMessage `json:"bundles,omitempty"`
}

// DefaultConfig is the configuration of a hub on the default ports.
func DefaultConfig() Config {
	return Config{
		PublicAddr:           ":1337",
		ControlAddr:          ":8337",
		HeartbeatIntervalMS:  10_000,
		HeartbeatMaxFailures: 3,
		LockTimeoutMS:        5_000,
		StepTimeoutMS:        5_000,
		ShutdownTimeoutMS:    5_000,
		RegistrantTTLMS:      30_000,
		MaxBodyBytes:         1 << 20,
	}
}

// ErrConfig is matched (errors.Is) by every error Validate and
// ParseConfig return.
var ErrConfig = errors.New("hub: bad config")

// ParseConfig reads a JSON config over DefaultConfig and validates it.
// Unknown fields are refused, so a misspelt key is not silently ignored.
func ParseConfig(b []byte) (Config, error) {
	cfg := DefaultConfig()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("%w: trailing data after the config object", ErrConfig)
	}
	return cfg, cfg.Validate()
}

// Validate refuses a config with a zero or negative interval, timeout,
// count or limit, or with no listener address.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    int64
	}{
		{"heartbeat_interval_ms", c.HeartbeatIntervalMS},
		{"heartbeat_max_failures", int64(c.HeartbeatMaxFailures)},
		{"lock_timeout_ms", c.LockTimeoutMS},
		{"step_timeout_ms", c.StepTimeoutMS},
		{"shutdown_timeout_ms", c.ShutdownTimeoutMS},
		{"registrant_ttl_ms", c.RegistrantTTLMS},
		{"max_body_bytes", c.MaxBodyBytes},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", ErrConfig, p.name, p.v)
		}
	}
	if c.PublicAddr == "" || c.ControlAddr == "" {
		return fmt.Errorf("%w: public_addr and control_addr are required", ErrConfig)
	}
	return nil
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

func (c Config) heartbeatInterval() time.Duration { return ms(c.HeartbeatIntervalMS) }
func (c Config) lockTimeout() time.Duration       { return ms(c.LockTimeoutMS) }
func (c Config) stepTimeout() time.Duration       { return ms(c.StepTimeoutMS) }
func (c Config) shutdownTimeout() time.Duration   { return ms(c.ShutdownTimeoutMS) }
func (c Config) registrantTTL() time.Duration     { return ms(c.RegistrantTTLMS) }
