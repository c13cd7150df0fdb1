//go:build ucx

package ucx

import "sync"

// registry maps the integer ids that ride through C (user_data, handler
// and error-handler arguments) back to Go values. C never holds a Go
// pointer; a callback whose id is gone (answered at Close) finds nothing
// and does nothing, so an answer is given once.
type registry[T any] struct {
	mu   sync.Mutex
	next uintptr
	m    map[uintptr]T
}

func (r *registry[T]) put(v T) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uintptr]T)
	}
	r.next++
	r.m[r.next] = v
	return r.next
}

func (r *registry[T]) get(id uintptr) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[id]
	return v, ok
}

// take removes and returns the value: the take-once slot of an answer.
func (r *registry[T]) take(id uintptr) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[id]
	delete(r.m, id)
	return v, ok
}

// Process-wide, since a callback names no worker.
var (
	opIDs      registry[*op]
	epIDs      registry[epRef]
	handlerIDs registry[handlerRef]
)

// epRef is what an endpoint's error handler argument names.
type epRef struct {
	l  *loop
	id EndpointID
}

// handlerRef is what an Active Message handler argument names.
type handlerRef struct {
	l  *loop
	id uint16
}
