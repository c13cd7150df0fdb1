package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/internal/hubconf"
)

// defaultVeloListen is where the hub's velo node listens when the config
// has no velo.listen_addr: every interface, a port the system picks.
// Registrants dial it to answer probes, and the hub tells them its
// address in the registration answer, so any port works; set one to
// open it in a firewall.
const defaultVeloListen = ":0"

type options struct {
	config       string
	embeddedEtcd string // data dir, "" for none
	etcdAddr     string // the embedded etcd's client address
	logFormat    string
	logLevel     string
	check        bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("velo-hub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", "", "the hub's JSON config `file` (required): the hub's Config plus \"store\" and \"velo\" sections")
	fs.StringVar(&o.embeddedEtcd, "embedded-etcd", "", "start an etcd server in this process with its data in `dir`, and keep the registrations there (a single-box trial)")
	fs.StringVar(&o.etcdAddr, "embedded-etcd-addr", "127.0.0.1:0", "client `address` of the embedded etcd (port 0: a free one; the log names it)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.check, "check", false, "validate the config and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: velo-hub --config hub.json [--embedded-etcd DIR] [--log-format text|json] [--log-level LEVEL]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("velo-hub takes no arguments, got %q", fs.Args())
	}
	if o.config == "" {
		fs.Usage()
		return o, errors.New("--config is required")
	}
	return o, nil
}

// loadConfig reads and checks the file, and applies --embedded-etcd: a
// memory store (the default) becomes an etcd store on the embedded
// server, which waits for the prefix (the only hub that can hold it is
// this one's previous run, killed: its lock expires within 10 s), and an
// etcd store without endpoints gets the embedded one.
func loadConfig(o options) (hubconf.File, error) {
	data, err := os.ReadFile(o.config)
	if err != nil {
		return hubconf.File{}, err
	}
	f, err := hubconf.Parse(data)
	if err != nil {
		return hubconf.File{}, fmt.Errorf("%s: %w", o.config, err)
	}
	if o.embeddedEtcd == "" {
		if err := f.Store.NeedsEndpoints(); err != nil {
			return hubconf.File{}, fmt.Errorf("%s: %w", o.config, err)
		}
		return f, nil
	}
	s := &f.Store
	switch {
	case s.Kind == hubconf.KindMemory:
		*s = hubconf.Store{Kind: hubconf.KindEtcd, Prefix: hubconf.DefaultPrefix, DialTimeoutMS: hubconf.DefaultDialTimeoutMS,
			WaitForPrefix: true}
	case len(s.Endpoints) > 0:
		return hubconf.File{}, fmt.Errorf("%s: %w: store: --embedded-etcd brings its own etcd; leave store.endpoints out", o.config, hub.ErrConfig)
	case s.TLS != nil || s.Username != "":
		return hubconf.File{}, fmt.Errorf("%s: %w: store: the embedded etcd has no TLS and no auth; leave store.tls and store.username out", o.config, hub.ErrConfig)
	}
	return f, nil
}
