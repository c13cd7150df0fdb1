package hubconf

import (
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/hub"
)

func TestParseSections(t *testing.T) {
	f, err := Parse([]byte(`{
		"public_addr": "127.0.0.1:1",
		"heartbeat_interval_ms": 500,
		"store": {"kind": "etcd", "endpoints": ["127.0.0.1:2379"], "wait_for_prefix": true,
		          "tls": {"ca_file": "ca.pem"}},
		"velo": {"listen_addr": ":7000", "advertise_addr": "hub.example:7000"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Hub.PublicAddr != "127.0.0.1:1" || f.Hub.HeartbeatIntervalMS != 500 || f.Hub.ControlAddr != ":8337" {
		t.Fatalf("hub config %+v", f.Hub)
	}
	s := f.Store
	if s.Kind != KindEtcd || s.Prefix != DefaultPrefix || s.DialTimeoutMS != DefaultDialTimeoutMS ||
		!s.WaitForPrefix || len(s.Endpoints) != 1 || s.TLS == nil || s.TLS.CAFile != "ca.pem" {
		t.Fatalf("store %+v", s)
	}
	if f.Velo.ListenAddr != ":7000" || f.Velo.AdvertiseAddr != "hub.example:7000" {
		t.Fatalf("velo %+v", f.Velo)
	}
}

func TestParseDefaultsToMemory(t *testing.T) {
	f, err := Parse([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Store.Kind != KindMemory || f.Hub.PublicAddr != ":1337" || f.Store.NeedsEndpoints() != nil {
		t.Fatalf("%+v", f)
	}
}

// TestParseRefuses: every bad file is refused with hub.ErrConfig and a
// message that names what is wrong.
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{`{"stroe": {}}`, `"stroe"`},
		{`{"store": {"kind": "etcd", "endpoint": ["x"]}}`, `store: json: unknown field "endpoint"`},
		{`{"velo": {"listen": ":1"}}`, `velo: json: unknown field "listen"`},
		{`{"store": {"kind": "redis"}}`, `unknown kind "redis"`},
		{`{"store": {"kind": "memory", "prefix": "/x"}}`, `kind "memory" takes no other key`},
		{`{"store": {"kind": "etcd", "prefix": "x"}}`, `prefix "x"`},
		{`{"store": {"kind": "etcd", "dial_timeout_ms": -1}}`, `dial_timeout_ms`},
		{`{"store": {"kind": "etcd", "username": "u"}}`, `password_file`},
		{`{"store": {"kind": "etcd", "tls": {"cert_file": "c"}}}`, `key_file`},
		{`{"store": {"kind": "etcd", "endpoints": [" "]}}`, `empty endpoint`},
		{`{"store": []}`, `store:`},
		{`{"lock_timeout_ms": 0}`, `lock_timeout_ms`},
		{`{} {}`, `trailing data`},
		{`null`, `JSON object`},
		{`[`, `unexpected EOF`},
	} {
		_, err := Parse([]byte(c.file))
		if !errors.Is(err, hub.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig naming %s", c.file, err, c.want)
		}
	}
}

func TestNeedsEndpoints(t *testing.T) {
	f, err := Parse([]byte(`{"store": {"kind": "etcd"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Store.NeedsEndpoints(); !errors.Is(err, hub.ErrConfig) || !strings.Contains(err.Error(), "--embedded-etcd") {
		t.Fatalf("%v", err)
	}
}

// FuzzParse: any input either parses to a file whose sections validate
// or is refused with ErrConfig; never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"store":{"kind":"etcd","endpoints":["a"]}}`, `{"velo":{"listen_addr":":0"}}`,
		`{"store":{"kind":"memory"}}`, `{"bundles":{"x":{}}}`, `[]`, `"x"`, `{"store":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			if !errors.Is(err, hub.ErrConfig) {
				t.Fatalf("error without ErrConfig: %v", err)
			}
			return
		}
		if err := file.Store.Validate(); err != nil {
			t.Fatalf("parsed a store that does not validate: %v", err)
		}
		if err := file.Hub.Validate(); err != nil {
			t.Fatalf("parsed a hub config that does not validate: %v", err)
		}
	})
}
