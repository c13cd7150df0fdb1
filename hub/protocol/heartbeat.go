package protocol

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// HeartbeatHandler is the velo handler that a registrant installs before it
// registers, and that the hub probes.
const HeartbeatHandler = "velo_hub_heartbeat"

// Heartbeat defaults of a hub.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultHeartbeatFailures = 3
	// DefaultRegistrantTTL is how long a store keeps an entry nobody
	// touched.
	DefaultRegistrantTTL = 30 * time.Second
)

// HeartbeatProbe is the JSON body the hub sends to HeartbeatHandler.
type HeartbeatProbe struct {
	// HubID of the probing hub run; a registrant that sees it change
	// knows the hub restarted.
	HubID HubID `json:"hub_id"`
	// Instance the hub believes it is probing.
	Instance ext.InstanceID `json:"instance_id"`
	// Epoch of the registration the hub holds for the instance.
	Epoch Epoch `json:"epoch"`
}

// HeartbeatAnswer is the registrant's answer. OK is true only while the
// registrant holds a registration with this hub or is getting one; the
// hub counts OK false as a failed probe.
type HeartbeatAnswer struct {
	OK    bool  `json:"ok"`
	HubID HubID `json:"hub_id,omitzero"`
}
