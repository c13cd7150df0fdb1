package hub

import (
	"errors"
	"fmt"
)

// ErrGraph is matched (errors.Is) by every error of the bundle and
// extension graph check, which runs before the hub binds a socket.
var ErrGraph = errors.New("hub: bad extension graph")

// plan is the checked graph: the extensions in start order (the built-in
// services first), and which bundle added each.
type plan struct {
	exts []Extension
}

// buildPlan checks the bundles and extensions and orders them. It does no
// I/O. Errors: two bundles or two extensions with one name, a required
// bundle or extension that is not added, a cycle, a name that is not one
// URL segment of [a-z0-9_-], and a config section that no bundle owns.
func buildPlan(builtin []Extension, bundles []Bundle, loose []Extension, cfg Config) (*plan, error) {
	byBundle := map[string]Bundle{}
	for _, b := range bundles {
		if !validSegment(b.Name()) {
			return nil, fmt.Errorf("%w: bundle name %q is not one URL segment of [a-z0-9_-]", ErrGraph, b.Name())
		}
		if _, dup := byBundle[b.Name()]; dup {
			return nil, fmt.Errorf("%w: two bundles named %q", ErrGraph, b.Name())
		}
		byBundle[b.Name()] = b
	}
	for name := range cfg.Bundles {
		if _, ok := byBundle[name]; !ok {
			return nil, fmt.Errorf("%w: config section bundles.%s has no bundle", ErrGraph, name)
		}
	}
	border, err := topo(names(bundles, Bundle.Name), func(n string) []string { return byBundle[n].Requires() }, "bundle")
	if err != nil {
		return nil, err
	}
	all := append([]Extension(nil), builtin...)
	for _, name := range border {
		exts, err := byBundle[name].Extensions(cfg.Bundles[name])
		if err != nil {
			return nil, fmt.Errorf("%w: bundle %q: %w", ErrGraph, name, err)
		}
		all = append(all, exts...)
	}
	all = append(all, loose...)
	byExt := map[string]Extension{}
	for _, e := range all {
		if !validSegment(e.Name()) {
			return nil, fmt.Errorf("%w: extension name %q is not one URL segment of [a-z0-9_-]", ErrGraph, e.Name())
		}
		if _, dup := byExt[e.Name()]; dup {
			return nil, fmt.Errorf("%w: two extensions named %q", ErrGraph, e.Name())
		}
		byExt[e.Name()] = e
	}
	for _, r := range cfg.RegistrationRequires {
		if _, ok := byExt[r]; !ok {
			return nil, fmt.Errorf("%w: registration_requires names %q, which is not added", ErrGraph, r)
		}
	}
	eorder, err := topo(names(all, Extension.Name), func(n string) []string { return byExt[n].Requires() }, "extension")
	if err != nil {
		return nil, err
	}
	p := &plan{}
	for _, n := range eorder {
		p.exts = append(p.exts, byExt[n])
	}
	return p, nil
}

func names[T any](xs []T, name func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

// topo orders nodes so that each comes after what it requires, keeping the
// order they were added in where the requirements allow it (so the
// built-in services, added first and requiring nothing, start first).
func topo(nodes []string, requires func(string) []string, kind string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range nodes {
		known[n] = true
	}
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var out []string
	var visit func(n string, path []string) error
	visit = func(n string, path []string) error {
		switch state[n] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("%w: %s requirement cycle: %v", ErrGraph, kind, append(path, n))
		}
		state[n] = visiting
		for _, r := range requires(n) {
			if !known[r] {
				return fmt.Errorf("%w: %s %q requires %q, which is not added", ErrGraph, kind, n, r)
			}
			if err := visit(r, append(path, n)); err != nil {
				return err
			}
		}
		state[n] = done
		out = append(out, n)
		return nil
	}
	for _, n := range nodes {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// validSegment: one URL segment of [a-z0-9_-], 1 to 64 bytes, so an
// extension cannot add a route to a core path.
func validSegment(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// find is the extension named name, nil if none.
func (p *plan) find(name string) Extension {
	for _, e := range p.exts {
		if e.Name() == name {
			return e
		}
	}
	return nil
}
