// Package client is the hub client: a node registers with a hub, answers
// its heartbeats, finds its peers and services through it, serves
// services, and calls the hub's extensions.
//
// The shortest way in is Join, which builds a node whose peer and
// service discovery is the hub and registers it:
//
//	node, hc, err := client.Join(ctx, "http://hub:8337", velo.WithTransport(tr))
//	defer hc.Close()                       // after node.Shutdown: unregisters
//	node.RegisterService(ctx, "llm-worker") // the hub keeps it
//	resp, err := node.Unary(ctx, velo.Service("llm-worker"), "generate", req)
//
// The same by hand:
//
//	hc, err := client.New(client.Config{URL: "http://hub:8337"})
//	node, err := velo.New(ctx, velo.WithTransport(tr),
//		velo.WithDiscovery(hc.Discovery()), velo.WithServiceDiscovery(hc.Services()))
//	err = hc.Register(ctx, node)
//
// # Handles
//
// A *HubClient is a cheap handle: Clone makes another that shares the one
// registration, and Close of the last open handle sends the DELETE that
// unregisters (best effort; the hub's probes or its TTL remove an entry
// that nobody unregistered). Discovery and Services return handles that
// hold no registration, so that a node, which keeps its discovery for as
// long as it lives, does not keep the registration alive.
//
// # Fault rules
//
// The client follows the hub book's rules for lost answers. Its heartbeat
// handler (velo_hub_heartbeat, installed before the first registration)
// answers ok only while the client holds a registration or is getting
// one, so a registration whose answer was lost is removed by the hub's
// probes and the client can register again. A re-registration that gets
// no answer from the hub (a timeout, a connection broken after the request
// left, a proxy's 502 or 504: anything that is not the hub's own
// ErrorBody) fails closed: the client drops the registration it held. An
// answer unauthorized or register_again on any call drops it too, and so
// does not_found for a heartbeat or an unregister. A register without a
// credential that the hub refuses with unauthorized means the hub holds a
// registration the client never got: until a register succeeds, the
// handler answers not ok even while a register runs.
//
// When a heartbeat comes from a hub id other than the one that gave the
// registration, the hub restarted on a persistent store: Recovered
// reports true and the client registers again presenting its credential,
// which recovers the reserved entry. Every registration carries the
// client's services, so they come back with it. A hub that restarted on
// an empty (memory) store does not know the client and never probes it:
// when no probe has come for 3 of the intervals the registration's answer
// gave, the client sends one HTTP heartbeat; not_found, unauthorized or
// register_again drop the registration, and the client registers again
// from scratch by itself (until Unregister).
//
// While the hub is down, ErrHubUnreachable and the service reads that got
// no answer match ext.ErrDiscoveryUnavailable, so velo's resolver keeps
// calling a service on the members it last learned.
//
// # Errors
//
// Every error the hub answers is a *protocol.Error (HubError) carrying the
// protocol's ErrorCode: errors.Is(err, protocol.CodeBusy),
// errors.As(err, &hubErr). A request that got no answer from the hub is a
// *NoAnswerError.
package client
