// Package hub is the hub server: the peer discovery of a velo application,
// with registration, liveness and hosted extensions, served on two HTTP
// listeners (public and control).
//
//	cfg, err := hub.ParseConfig(jsonBytes)
//	h, err := hub.New(cfg, hub.WithVelo(velo.WithTransport(tr)), hub.WithBundle(b))
//	err = h.Serve(ctx)      // returns once the hub accepts requests
//	...
//	err = h.Shutdown(ctx)   // stops in order; a second call waits for the same stop
//
// Without WithStore the hub keeps registrations in a store.InMemoryStore;
// without WithVelo it only does discovery and liveness is the store's TTL.
// Every error a core route answers is a protocol.ErrorBody with a stable
// code. See docs/hub.md for the routes, the codes and the rules of the
// registration transaction.
package hub
