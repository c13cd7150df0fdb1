// Package protocol is the hub's wire protocol: its HTTP paths and route
// patterns, the JSON bodies of each route, the ids it hands out (HubID,
// Epoch, Credential), the velo heartbeat handler's name and bodies, and the
// ErrorBody that every core route answers on failure.
//
// It depends on the standard library and on ext only, so a program that
// speaks to a hub over HTTP needs neither the hub server nor the velo
// runtime.
//
// # Routes
//
// A hub serves two listeners. The public one (port 1337 by default) serves
// GET /v1/health, GET /v1/hub, the peer lookups and the service reads. The
// control one (port 8337) serves all of those and also registration,
// unregistration, heartbeat, probe and the service writes. Extension routes
// live under /v1/ext/{name}/.
//
//	POST   /v1/instances                          register (RegisterRequest → RegisterResponse)
//	GET    /v1/instances                          list (InstanceList)
//	DELETE /v1/instances/{id}                     unregister, with the credential
//	POST   /v1/instances/{id}/heartbeat           refresh liveness, with the credential (HeartbeatResponse)
//	POST   /v1/instances/{id}/probe               the hub probes the instance over velo (ProbeResponse)
//	GET    /v1/peers/instance/{id}                peer lookup by instance id (ext.PeerInfo JSON)
//	GET    /v1/peers/worker/{id}                  peer lookup by worker id, 16 hex digits
//	GET    /v1/health                             Health
//	GET    /v1/hub                                HubInfo
//	GET    /v1/services                           ServiceList
//	GET    /v1/services/{name}                    ServiceInstances
//	GET    /v1/services/{name}/watch              server-sent events of WatchEvent
//	PUT    /v1/services/{name}/instances/{id}     serve a name, with the credential
//	DELETE /v1/services/{name}/instances/{id}     stop serving it, with the credential
//
// A mutation that a registration owns carries the registration's
// credential in the x-velo-hub-credential header (CredentialHeader). A
// registration that presents a credential in that header is a
// re-registration of the instance the credential belongs to.
//
// # Errors
//
// Every error answer of a core route is an ErrorBody, {"code": ..,
// "message": ..}, with one of the ErrorCode constants; the HTTP status is
// the code's Status. A client acts on the code, never on the message:
// CodeBusy means retry, CodeRegisterAgain means register again without a
// credential, CodeRecovered means register again presenting the
// credential. An Error built from an answer matches its code with
// errors.Is:
//
//	if errors.Is(err, protocol.CodeBusy) { retry() }
package protocol
