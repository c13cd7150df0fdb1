package hub

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type testBundle struct {
	name string
	req  []string
	exts []Extension
	got  json.RawMessage
}

func (b *testBundle) Name() string       { return b.name }
func (b *testBundle) Requires() []string { return b.req }
func (b *testBundle) Extensions(s json.RawMessage) ([]Extension, error) {
	b.got = s
	return b.exts, nil
}

type reqExt struct {
	BaseExtension
	name string
	req  []string
}

func (e *reqExt) Name() string       { return e.name }
func (e *reqExt) Requires() []string { return e.req }

// TestGraphChecks: the graph is checked before any socket binds, and
// each kind of mistake is refused with ErrGraph.
func TestGraphChecks(t *testing.T) {
	cases := []struct {
		name string
		opts []Option
		cfg  func(*Config)
		want string
	}{
		{"duplicate extension", []Option{WithExtension(&reqExt{name: "a"}), WithExtension(&reqExt{name: "a"})}, nil, "two extensions"},
		{"services is taken", []Option{WithExtension(&reqExt{name: "services"})}, nil, "two extensions"},
		{"missing requirement", []Option{WithExtension(&reqExt{name: "a", req: []string{"b"}})}, nil, "not added"},
		{"cycle", []Option{WithExtension(&reqExt{name: "a", req: []string{"b"}}), WithExtension(&reqExt{name: "b", req: []string{"a"}})}, nil, "cycle"},
		{"bad name", []Option{WithExtension(&reqExt{name: "A/b"})}, nil, "URL segment"},
		{"duplicate bundle", []Option{WithBundle(&testBundle{name: "x"}), WithBundle(&testBundle{name: "x"})}, nil, "two bundles"},
		{"missing bundle", []Option{WithBundle(&testBundle{name: "x", req: []string{"y"}})}, nil, "not added"},
		{"unowned section", nil, func(c *Config) { c.Bundles = map[string]json.RawMessage{"ghost": json.RawMessage(`{}`)} }, "no bundle"},
		{"unknown registration requirement", nil, func(c *Config) { c.RegistrationRequires = []string{"nope"} }, "not added"},
	}
	for _, c := range cases {
		cfg := testConfig()
		cfg.PublicAddr = "256.0.0.1:1" // would fail to bind: the check runs first
		if c.cfg != nil {
			c.cfg(&cfg)
		}
		_, err := New(cfg, c.opts...)
		if !errors.Is(err, ErrGraph) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// A good graph: order follows requirements, services first, and a
	// bundle reads its own section.
	b := &testBundle{name: "base", exts: []Extension{&reqExt{name: "z"}}}
	top := &testBundle{name: "top", req: []string{"base"}, exts: []Extension{&reqExt{name: "y", req: []string{"z"}}}}
	cfg := testConfig()
	cfg.Bundles = map[string]json.RawMessage{"base": json.RawMessage(`{"k":1}`)}
	h, err := New(cfg, WithBundle(top), WithBundle(b))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range h.plan.exts {
		order = append(order, e.Name())
	}
	if strings.Join(order, ",") != "services,z,y" || string(b.got) != `{"k":1}` {
		t.Fatalf("order %v, section %s", order, b.got)
	}
}

// TestConfig: defaults for what the file leaves out, zero intervals and
// timeouts refused, unknown keys refused.
func TestConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"heartbeat_interval_ms": 500, "bundles": {"x": {}}}`))
	if err != nil || c.HeartbeatIntervalMS != 500 || c.HeartbeatMaxFailures != 3 || c.PublicAddr != ":1337" || c.ControlAddr != ":8337" {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range []string{`{"heartbeat_interval_ms": 0}`, `{"step_timeout_ms": 0}`, `{"lock_timeout_ms": -1}`,
		`{"shutdown_timeout_ms": 0}`, `{"heartbeat_max_failures": 0}`, `{"hearbeat_interval_ms": 5}`, `{} {}`, `[`} {
		if _, err := ParseConfig([]byte(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("zero Config: %v", err)
	}
}
