// Package ext is the stable plugin surface of velo.
//
// A transport, frame transport or discovery backend that lives outside this
// module depends on this package only. It holds the interfaces those plugins
// implement (Transport, FrameTransport, PeerDiscovery, ServiceDiscovery,
// Observability) and the value types the interfaces use: identities
// (InstanceID, WorkerID, PeerInfo, WorkerAddress), MessageType, Frame,
// SendOutcome, the AdmissionGate and the TransportAdapter that routes inbound
// frames and owns the in-flight count used by graceful shutdown.
//
// The package imports the Go standard library only; a test enforces it, so
// plugins stay light.
package ext
