package messenger

import "github.com/velo-go/velo/metrics"

// RebindHandlerMetrics points the handler's series binder at vm. A test
// gives it a decoy after the handler's first calls, and checks that later
// calls never looked a label set up in it. Call it with no call in flight.
func (m *Messenger) RebindHandlerMetrics(name string, vm *metrics.VeloMetrics) {
	(*m.handlers.Load())[name].met.vm = vm
}
