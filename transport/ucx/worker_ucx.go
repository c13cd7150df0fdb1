//go:build ucx

package ucx

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/internal/ucx"
)

// New builds a UCX transport with a worker of its own: one ucp_context
// and one ucp_worker, driven by a progress goroutine locked to an OS
// thread. UCX reads UCX_* from the environment, which wins over WithTLS
// and WithNetDevices.
func New(opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	w, err := ucx.NewWorker(ucx.Config{TLS: o.tls, NetDevices: o.netDevices, Spin: o.spin, NoPeerErrors: o.peerErrorsOff()})
	if err != nil {
		return nil, fmt.Errorf("ucx: worker: %w", err)
	}
	t, err := newTransport(o, ucxWorker{w})
	if err != nil {
		w.Close()
		return nil, err
	}
	return t, nil
}

// ucxWorker adapts internal/ucx's Worker to amWorker: the same methods,
// with the binding's own EndpointID and Mem types.
type ucxWorker struct{ w *ucx.Worker }

func (u ucxWorker) Address() []byte  { return u.w.Address() }
func (u ucxWorker) MaxAMHeader() int { return u.w.MaxAMHeader() }
func (u ucxWorker) Close() error     { return u.w.Close() }

func (u ucxWorker) Connect(addr []byte) (endpointID, error) {
	id, err := u.w.Connect(addr)
	return endpointID(id), err
}

func (u ucxWorker) CloseEndpoint(ep endpointID) { u.w.CloseEndpoint(ucx.EndpointID(ep)) }

func (u ucxWorker) OnEndpointError(fn func(ep endpointID, err error)) {
	u.w.OnEndpointError(func(ep ucx.EndpointID, err error) { fn(endpointID(ep), err) })
}

func (u ucxWorker) SetAMHandler(id uint16, fn func(header, data []byte)) { u.w.SetAMHandler(id, fn) }

func (u ucxWorker) SendAM(ep endpointID, id uint16, header, data []byte, done func(error)) error {
	return u.w.SendAM(ucx.EndpointID(ep), id, header, data, done)
}

func (u ucxWorker) Map(base unsafe.Pointer, n int) (memMapping, error) {
	m, err := u.w.Map(base, n)
	if err != nil {
		return nil, err
	}
	return ucxMem{m}, nil
}

func (u ucxWorker) Alloc(n int) (unsafe.Pointer, memMapping, error) {
	m, err := u.w.Alloc(n)
	if err != nil {
		return nil, nil, err
	}
	return m.Base(), ucxMem{m}, nil
}

func (u ucxWorker) Get(ctx context.Context, ep endpointID, remoteAddr uint64, rkey []byte, dst []byte) error {
	return u.w.Get(ctx, ucx.EndpointID(ep), remoteAddr, rkey, dst)
}

// ucxMem is a Mem with rdma.Mapping's method names.
type ucxMem struct{ m *ucx.Mem }

func (m ucxMem) PackKey() ([]byte, error)       { return m.m.PackRkey() }
func (m ucxMem) EffectiveRange() (uintptr, int) { return m.m.EffectiveRange() }
func (m ucxMem) Unmap() error                   { return m.m.Unmap() }
