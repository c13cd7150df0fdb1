package ext

// Handoff is a transport reader's offer to pass its role on. A sink that
// is about to run a request on the reader goroutine (rather than wake a
// worker for it) calls Handoff first: when it returns true, another
// goroutine reads the connection from now on, and the sink may block as
// long as its request needs without holding up the connection. The batch
// and its slice stay the sink's until it returns. False means the reader
// cannot pass its role (the transport is closing): the sink must not block.
//
// The common case, a short request on a connection that has nothing more
// to read, then costs no hand-off before the request runs: the goroutine
// that read it runs it at once, and the wake of the next reader happens
// beside it, not in front of it.
type Handoff interface {
	Handoff() bool
}

// sinkOf is the adapter's request sink: OnMessagesHandoff, or OnMessages
// without a hand-off, or nil (the message queue).
func sinkOf(cfg AdapterConfig) func([]InboundMessage, Handoff) {
	switch {
	case cfg.OnMessagesHandoff != nil:
		return cfg.OnMessagesHandoff
	case cfg.OnMessages != nil:
		on := cfg.OnMessages
		return func(b []InboundMessage, _ Handoff) { on(b) }
	}
	return nil
}
