package protocol

import (
	"strconv"

	"github.com/velo-go/velo/ext"
)

// Default listener ports.
const (
	DefaultPublicPort  = 1337
	DefaultControlPort = 8337
)

// CredentialHeader carries a registration's credential on every mutation
// the registration owns, and on a re-registration.
const CredentialHeader = "x-velo-hub-credential"

// Path parameters of the route patterns, as http.Request.PathValue reads
// them.
const (
	ParamID   = "id"
	ParamName = "name"
)

// Paths of the core routes (no path parameters).
const (
	PathInstances = "/v1/instances"
	PathHealth    = "/v1/health"
	PathHub       = "/v1/hub"
	PathServices  = "/v1/services"
	PathExt       = "/v1/ext/"
)

// Route patterns in net/http ServeMux syntax (Go 1.22 and later): a method,
// a path, and {id} or {name} wildcards named by ParamID and ParamName.
const (
	RouteRegister       = "POST /v1/instances"
	RouteListInstances  = "GET /v1/instances"
	RouteUnregister     = "DELETE /v1/instances/{id}"
	RouteHeartbeat      = "POST /v1/instances/{id}/heartbeat"
	RouteProbe          = "POST /v1/instances/{id}/probe"
	RoutePeerByInstance = "GET /v1/peers/instance/{id}"
	RoutePeerByWorker   = "GET /v1/peers/worker/{id}"
	RouteHealth         = "GET /v1/health"
	RouteHub            = "GET /v1/hub"
	RouteListServices   = "GET /v1/services"
	RouteService        = "GET /v1/services/{name}"
	RouteWatchService   = "GET /v1/services/{name}/watch"
	RouteServeService   = "PUT /v1/services/{name}/instances/{id}"
	RouteUnserveService = "DELETE /v1/services/{name}/instances/{id}"
)

// InstancePath is /v1/instances/{id}: DELETE unregisters.
func InstancePath(id ext.InstanceID) string { return PathInstances + "/" + id.String() }

// HeartbeatPath is /v1/instances/{id}/heartbeat.
func HeartbeatPath(id ext.InstanceID) string { return InstancePath(id) + "/heartbeat" }

// ProbePath is /v1/instances/{id}/probe.
func ProbePath(id ext.InstanceID) string { return InstancePath(id) + "/probe" }

// PeerByInstancePath is /v1/peers/instance/{id}.
func PeerByInstancePath(id ext.InstanceID) string { return "/v1/peers/instance/" + id.String() }

// PeerByWorkerPath is /v1/peers/worker/{id}, the worker id in the 16 hex
// digits that FormatWorkerID writes.
func PeerByWorkerPath(id ext.WorkerID) string { return "/v1/peers/worker/" + FormatWorkerID(id) }

// ServicePath is /v1/services/{name}. The caller validates name first
// (ValidateServiceName); a valid name needs no escaping.
func ServicePath(name string) string { return PathServices + "/" + name }

// WatchServicePath is /v1/services/{name}/watch.
func WatchServicePath(name string) string { return ServicePath(name) + "/watch" }

// ServiceInstancePath is /v1/services/{name}/instances/{id}: PUT serves
// the name, DELETE stops serving it.
func ServiceInstancePath(name string, id ext.InstanceID) string {
	return ServicePath(name) + "/instances/" + id.String()
}

// ExtPath is /v1/ext/{name}/ followed by rest (no leading slash).
func ExtPath(name, rest string) string { return PathExt + name + "/" + rest }

// FormatWorkerID writes id as 16 lower-case hex digits, as ext.WorkerID's
// String does.
func FormatWorkerID(id ext.WorkerID) string { return id.String() }

// ParseWorkerID reads the 16 hex digits of a worker id in a path. Other
// lengths, signs and prefixes are refused, so one worker has one path.
func ParseWorkerID(s string) (ext.WorkerID, error) {
	if len(s) != 16 {
		return 0, badRequestf("worker id %q is not 16 hex digits", s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, badRequestf("worker id %q is not 16 hex digits", s)
	}
	return ext.WorkerID(v), nil
}

// ParseInstanceID reads an instance id in a path (the canonical UUID form)
// and answers a CodeBadRequest Error when it is not one.
func ParseInstanceID(s string) (ext.InstanceID, error) {
	id, err := ext.ParseInstanceID(s)
	if err != nil {
		return ext.InstanceID{}, badRequestf("instance id %q is not a UUID", s)
	}
	return id, nil
}
