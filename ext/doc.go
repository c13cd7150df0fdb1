// Package ext is the stable plugin surface of velo.
//
// A transport, frame transport or discovery backend that lives outside this
// module depends on this package only. It holds the interfaces those plugins
// implement (Transport; FrameTransport with its FrameListener, FrameInbound
// and FrameSender; PeerDiscovery, ServiceDiscovery, Observability) and the value types the interfaces use: identities
// (InstanceID, WorkerID, PeerInfo, WorkerAddress), MessageType, Frame,
// SendOutcome, the AdmissionGate and the TransportAdapter that routes inbound
// frames and owns the in-flight count used by graceful shutdown.
//
// The interfaces grow without breaking the plugins that implement them: a
// new capability is an optional interface that a plugin may also implement,
// which the node finds with a type assertion, as net/http finds
// http.Flusher on a ResponseWriter (ConnectionObservability is one). A
// method is never added to an existing interface.
//
// A transport reports to the node through its TransportAdapter: admitted
// requests, answers, frames it could not send (ReportSendError) and
// connections to a peer that ended (ReportPeerLost, with ErrPeerUnreachable
// and, for a peer that said it was shutting down, ErrPeerShutdown). The
// conformance suite in transport/transporttest checks a transport against
// this contract.
//
// The package imports the Go standard library only; a test enforces it, so
// plugins stay light.
package ext
