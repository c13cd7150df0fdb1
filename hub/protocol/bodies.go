package protocol

import (
	"encoding/json"

	"github.com/velo-go/velo/ext"
)

// RegisterRequest is the body of POST /v1/instances.
//
// Extensions maps an extension's name to its payload. A name that is
// absent, or whose payload is JSON null, means the registrant did not opt
// in to that extension. The services payload (ServicesExtension) is a
// ServicesPayload.
type RegisterRequest struct {
	Peer       ext.PeerInfo               `json:"peer"`
	Extensions map[string]json.RawMessage `json:"extensions,omitempty"`
}

// ServicesPayload is the payload of the built-in services extension in a
// RegisterRequest: the names the instance serves, exactly.
type ServicesPayload struct {
	Names []string `json:"names"`
}

// RegisterResponse is the answer to a successful registration.
type RegisterResponse struct {
	// Credential goes in CredentialHeader of every mutation the
	// registration owns. It replaces any earlier credential.
	Credential Credential `json:"credential"`
	// Epoch of this registration.
	Epoch Epoch `json:"epoch"`
	// HubID of the hub run that accepted it.
	HubID HubID `json:"hub_id"`
	// HubPeer is the hub's own velo peer, for the registrant to register
	// with its node; nil when the hub runs without velo.
	HubPeer *ext.PeerInfo `json:"hub_peer,omitempty"`
	// Recovered is true when the registration re-registered an entry the
	// hub recovered after a restart.
	Recovered bool `json:"recovered,omitempty"`
	// HeartbeatIntervalMS is how often the hub probes the registration
	// over velo; 0 (absent) when the hub runs without velo and does not
	// probe. A registrant that hears no probe for a few intervals asks
	// the hub with the HTTP heartbeat whether it still holds the
	// registration (a hub that restarted on an empty store does not).
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms,omitempty"`
}

// HeartbeatResponse answers POST /v1/instances/{id}/heartbeat.
type HeartbeatResponse struct {
	OK    bool  `json:"ok"`
	HubID HubID `json:"hub_id"`
	Epoch Epoch `json:"epoch"`
}

// ProbeResponse answers POST /v1/instances/{id}/probe: whether the
// instance answered a velo heartbeat with ok: true, and how long the
// round trip took.
type ProbeResponse struct {
	OK        bool   `json:"ok"`
	RTTMicros int64  `json:"rtt_us"`
	Error     string `json:"error,omitempty"`
}

// Health answers GET /v1/health. Store is the store's continuity in its
// lower-case name ("live", "degraded", "lost", "fenced").
type Health struct {
	Status string `json:"status"`
	HubID  HubID  `json:"hub_id"`
	Store  string `json:"store"`
}

// HubInfo answers GET /v1/hub. Extensions lists the extensions added by
// the program in start order; the built-in services extension is not
// listed.
type HubInfo struct {
	HubID      HubID         `json:"hub_id"`
	Version    string        `json:"version"`
	Peer       *ext.PeerInfo `json:"peer,omitempty"`
	Extensions []string      `json:"extensions"`
}

// InstanceInfo is one registration in an InstanceList.
type InstanceInfo struct {
	Peer ext.PeerInfo `json:"peer"`
	// WorkerID in the form ParseWorkerID reads.
	WorkerID string `json:"worker_id"`
	Epoch    Epoch  `json:"epoch"`
	// Pinned marks the hub's own entry.
	Pinned bool `json:"pinned,omitempty"`
	// Reserved marks an entry recovered after a restart whose owner has
	// not registered again yet.
	Reserved bool `json:"reserved,omitempty"`
	// LastSeenUnixMillis is the last touch (a heartbeat or a successful
	// probe), or the registration time.
	LastSeenUnixMillis int64 `json:"last_seen_unix_ms"`
	// Extensions names the extensions the registrant opted in to.
	Extensions []string `json:"extensions,omitempty"`
}

// InstanceList answers GET /v1/instances.
type InstanceList struct {
	Instances []InstanceInfo `json:"instances"`
}

// ServiceList answers GET /v1/services: the names with at least one
// instance, sorted.
type ServiceList struct {
	Services []string `json:"services"`
}

// ServiceInstances answers GET /v1/services/{name}.
type ServiceInstances struct {
	Name      string           `json:"name"`
	Instances []ext.InstanceID `json:"instances"`
}
