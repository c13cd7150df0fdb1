package ext

// Target names who a call goes to: one instance (an InstanceID) or any
// live instance of a service (a ServiceName). The set is closed: only
// this package can add kinds, so a caller's switch over the two is
// complete.
type Target interface {
	// target seals the interface.
	target()
}

// ServiceName is a target resolved through service discovery: a call to
// it goes to one live instance that registered under the name.
type ServiceName string

func (ServiceName) target() {}

// String is the name itself.
func (s ServiceName) String() string { return string(s) }

func (InstanceID) target() {}
