package hubconf

import (
	"fmt"
	"strings"

	"github.com/velo-go/velo/hub"
)

// Store kinds.
const (
	// KindMemory keeps registrations in the hub's memory: a restart
	// loses them, and every node registers again from scratch.
	KindMemory = "memory"
	// KindEtcd keeps them in etcd, so a restarted hub recovers them.
	KindEtcd = "etcd"
)

// DefaultPrefix is the etcd key prefix of one hub deployment (the
// etcdstore package's default, repeated here so this package imports no
// etcd code).
const DefaultPrefix = "/velo-hub/default"

// DefaultDialTimeoutMS bounds the first connection to etcd.
const DefaultDialTimeoutMS = 5000

// Store is the "store" section.
type Store struct {
	// Kind is "memory" (the default) or "etcd".
	Kind string `json:"kind"`
	// Endpoints are etcd's client endpoints, host:port or a URL
	// (https:// with TLS). Required for etcd, unless velo-hub starts an
	// embedded etcd (--embedded-etcd), which brings its own.
	Endpoints []string `json:"endpoints,omitempty"`
	// Prefix is the key prefix; one hub deployment per prefix. Default
	// "/velo-hub/default".
	Prefix string `json:"prefix,omitempty"`
	// DialTimeoutMS bounds the first connection to etcd. Default 5,000.
	DialTimeoutMS int64 `json:"dial_timeout_ms,omitempty"`
	// WaitForPrefix makes a hub that finds the prefix held wait for it
	// (the lock of a hub that crashed expires within 10 s) instead of
	// exiting. A clean stop frees the prefix at once.
	WaitForPrefix bool `json:"wait_for_prefix,omitempty"`
	// Username and PasswordFile log in to etcd (its auth); the password
	// is read from the file, whose trailing newline is dropped.
	Username     string `json:"username,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
	// TLS connects to etcd over TLS.
	TLS *TLS `json:"tls,omitempty"`
}

// TLS is the store's "tls" section: PEM files.
type TLS struct {
	// CAFile verifies etcd's certificate. Empty: the system roots.
	CAFile string `json:"ca_file,omitempty"`
	// CertFile and KeyFile are the hub's client certificate, for an etcd
	// that asks for one; both or neither.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// ServerName overrides the name checked in etcd's certificate.
	ServerName string `json:"server_name,omitempty"`
}

func (s *Store) setDefaults() {
	if s.Kind == "" {
		s.Kind = KindMemory
	}
	if s.Kind != KindEtcd {
		return
	}
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	if s.DialTimeoutMS == 0 {
		s.DialTimeoutMS = DefaultDialTimeoutMS
	}
}

// Validate refuses an unknown kind, etcd settings on a memory store, and
// an etcd store with a bad prefix, timeout or TLS pair. Endpoints are not
// checked here: velo-hub fills them in for an embedded etcd; see
// NeedsEndpoints.
func (s Store) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: store: "+format, append([]any{hub.ErrConfig}, a...)...)
	}
	switch s.Kind {
	case KindMemory:
		if len(s.Endpoints) > 0 || s.Prefix != "" || s.DialTimeoutMS != 0 || s.WaitForPrefix ||
			s.Username != "" || s.PasswordFile != "" || s.TLS != nil {
			return bad(`kind "memory" takes no other key (endpoints, prefix, tls, ... are for kind "etcd")`)
		}
		return nil
	case KindEtcd:
	default:
		return bad(`unknown kind %q (want "memory" or "etcd")`, s.Kind)
	}
	if !strings.HasPrefix(s.Prefix, "/") || strings.HasSuffix(s.Prefix, "/") {
		return bad("prefix %q must start with / and not end with one", s.Prefix)
	}
	if s.DialTimeoutMS <= 0 {
		return bad("dial_timeout_ms must be positive, got %d", s.DialTimeoutMS)
	}
	if (s.Username == "") != (s.PasswordFile == "") {
		return bad("username and password_file go together")
	}
	for _, ep := range s.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return bad("an empty endpoint")
		}
	}
	if t := s.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		return bad("tls: cert_file and key_file go together")
	}
	return nil
}

// NeedsEndpoints is the error for an etcd store without endpoints, which
// only an embedded etcd can make up for.
func (s Store) NeedsEndpoints() error {
	if s.Kind == KindEtcd && len(s.Endpoints) == 0 {
		return fmt.Errorf("%w: store: kind \"etcd\" needs endpoints (or run velo-hub --embedded-etcd DIR)", hub.ErrConfig)
	}
	return nil
}
