package messenger

import (
	"sync"
	"time"
)

// Teardown hooks let a subsystem built on the messenger (the streaming
// mux) end its work while the transports still carry its last messages:
// Shutdown runs them after the drain and before it stops the transports.
// A hook stalled behind a slow peer must not hold the transports up for
// ever, so Shutdown waits for the hooks only TeardownHookGrace before it
// tears the transports down; that teardown fails what the hooks wait on,
// and Shutdown returns only after every hook has.

// teardownHookGrace is how long Shutdown waits for its teardown hooks
// before it stops the transports under them.
const teardownHookGrace = 500 * time.Millisecond

// onTeardown registers fn to run once, when Shutdown has drained and
// before it stops the transports. fn may send; it must return once the
// transports are down.
func (m *Messenger) onTeardown(fn func()) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	m.downHooks = append(m.downHooks, fn)
}

// runTeardownHooks starts the hooks, waits for them at most
// TeardownHookGrace, and returns a wait for the ones still running.
func (m *Messenger) runTeardownHooks() (wait func()) {
	m.regMu.Lock()
	hooks := m.downHooks
	m.downHooks = nil
	m.regMu.Unlock()
	if len(hooks) == 0 {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, fn := range hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(teardownHookGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return func() { <-done }
}
