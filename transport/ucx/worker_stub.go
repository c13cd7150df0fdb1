//go:build !ucx

package ucx

// New fails with ErrNotBuilt: this binary was built without the ucx
// build tag, so it has no UCX. The options are still checked.
func New(opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	return nil, ErrNotBuilt
}
