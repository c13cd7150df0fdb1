package protocol

// RouteWatchInstances streams the hub's registrations as server-sent
// events, for the operator's page and for tools that follow the hub: one
// "instances" event (WatchInstancesEvent) with an InstancesSnapshot when
// the stream opens, again after every change of the registrations or of
// the services, and at least every WatchKeepAlive, so that the last
// heartbeat it shows stays fresh. Changes that come close together are
// sent as one snapshot.
const RouteWatchInstances = "GET /v1/instances/watch"

// PathWatchInstances is RouteWatchInstances's path.
const PathWatchInstances = PathInstances + "/watch"

// WatchInstancesEvent is the SSE event name of an InstancesSnapshot.
const WatchInstancesEvent = "instances"

// RouteUI is the operator's read-only web page on the public listener.
const RouteUI = "GET /{$}"

// InstancesSnapshot is the whole of the hub's registrations and services
// at one point in time.
type InstancesSnapshot struct {
	HubID     HubID              `json:"hub_id"`
	Instances []InstanceView     `json:"instances"`
	Services  []ServiceInstances `json:"services"`
}

// InstanceView is an InstanceInfo with its address spelt out for people:
// each transport key with its endpoint as text.
type InstanceView struct {
	InstanceInfo
	Address map[string]string `json:"address"`
}
