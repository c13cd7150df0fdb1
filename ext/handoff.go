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

// Waiter is a wait that a sink would have its transport's reader make
// before the reader reads again: a queue of the sink's past its bound,
// which the reader lets go down by not reading, so that the socket pushes
// back on the sender. Wait returns once the sink can take more.
type Waiter interface {
	Wait()
}

// WaitDeferrer is a Handoff from a reader that makes a sink's waits itself,
// once everything it has read is handed on. A sink that would wait after a
// batch given with one calls DeferWait instead and returns: what follows
// the batch in the same read (an answer, an event) is then routed before
// the reader waits, rather than held behind the wait. A reader may pass a
// WaitDeferrer whose Handoff is false with a batch that is not the last of
// its read. A sink given no Handoff, or one that is no WaitDeferrer, waits
// itself: its transport gave no sign of what follows.
type WaitDeferrer interface {
	Handoff
	// DeferWait has the reader call w.Wait after the frames it has read
	// are handed on and before it reads again; a w deferred twice in one
	// read waits once. A reader whose connection ends drops its waits.
	DeferWait(w Waiter)
}

// deferOnly is a reader's WaitDeferrer that offers no hand-off: what the
// adapter passes with a request of a batch it splits (a drain's exempt
// requests, AdmitBatchHandoff).
type deferOnly struct{ d WaitDeferrer }

func (deferOnly) Handoff() bool { return false }

func (o deferOnly) DeferWait(w Waiter) { o.d.DeferWait(w) }

// HandOnNow is a Handoff that can also pass its role on while the sink's
// run goes on, rather than when the run has lasted the transport's bound:
// a sink calls it once it knows its request will wait, such as on a call
// whose answer may come back on the very connection the reader holds, or
// on a cancel that only reading the connection brings. A reader's bound
// is short but rests on a timer, which fires late when the process is
// idle (streamsock's watchdog: a millisecond or more). It is safe from any
// goroutine, and does nothing once the run ended or the role went. A
// reader offers itself again for its later runs, so a HandOnNow made late,
// racing the end of the run it was meant for, may hand on the next one:
// a follower woken early, which costs a wake and nothing else.
type HandOnNow interface {
	Handoff
	HandOnNow()
}

// HandOnListener hears from a transport that the connection of a reader
// whose role a sink took (HandoffNotifier) went to another goroutine
// while the sink's run on that reader goes on.
type HandOnListener interface {
	HandedOn()
}

// HandoffNotifier is a Handoff that also tells the sink when its run loses
// the reader's role: a sink that runs several requests of one read on the
// reader, one after the other, learns when the ones not yet started need
// a goroutine of their own, because the run outlasted the transport's
// bound, or the sink (HandOnNow) or a shutdown handed the connection on.
//
// HandoffNotify is Handoff, and has the transport call l.HandedOn once if
// it hands the connection on before the run ends. The call comes from the
// transport's own goroutine (its watchdog's, or whichever called
// HandOnNow), after the connection went, and may come after the run
// ended when the two race: a sink must take a late call for its next run
// (the way HandOnNow does), which should cost it no more than a goroutine
// woken early. A run that ends with the connection still the reader's
// hears nothing.
type HandoffNotifier interface {
	Handoff
	HandoffNotify(l HandOnListener) bool
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
