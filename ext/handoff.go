package ext

// Handoff is a transport reader's offer to pass its role on. A sink that
// is about to run a request on the reader goroutine (rather than wake a
// worker for it) calls Handoff first: when it returns true, the sink may
// block as long as its request needs without holding up the connection
// for more than a short bound: the reader keeps reading it once the sink
// returns, and if the sink runs longer than the bound, the transport
// gives the connection to another goroutine meanwhile. The batch and its
// slice stay the sink's until it returns. False means the reader cannot
// pass its role (the transport is closing): the sink must not block.
//
// The common case, a short request on a connection that has nothing more
// to read, then costs no hand-off at all: the goroutine that read it runs
// it at once and, with its answer out, reads on; no goroutine is woken.
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
