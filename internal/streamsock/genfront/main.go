// Command genfront writes the public face of a stream-socket transport:
// the Transport type of package tcp or uds, its ext.Transport methods (each
// forwarding to internal/streamsock), Stats and the options both packages
// take. The two packages had the same hundred lines written twice; now one
// template holds them, and each package keeps its own copy so that go doc
// shows the methods and their comments, which promoted methods of an
// embedded type from another package would not.
//
// Package quic takes the forwarding methods and the options whose text is
// the same: its Transport type, Shutdown, Closed, Stats and the other
// options are its own (quic.go), since it holds more than the streamsock
// transport, closes its sockets itself and documents its own lanes and
// limits.
//
// Run it through go generate in transport/tcp, transport/uds or
// transport/quic:
//
//	go run ../../internal/streamsock/genfront tcp
//
// TestGeneratedUpToDate fails when a committed file differs from what this
// command writes.
package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"go/format"
	"os"
	"text/template"
)

// outFile is the name of the generated file in each package.
const outFile = "transport_gen.go"

// target is what differs between the packages in the generated text.
type target struct {
	Package string // package name, also the address key
	Name    string // how the type comment names the socket kind
	// OwnType: the package declares Transport, Shutdown, Closed, Stats and
	// the options itself; only the forwarding methods are generated.
	OwnType bool
	// Start and Register end the doc comments of those methods.
	Start, Register string
}

// Doc comment ends shared by the plain socket transports.
const (
	listenDoc   = "listens"
	endpointDoc = "endpoint. Nothing is dialed until the first send."
)

// targets are the packages genfront writes for.
var targets = map[string]target{
	"tcp": {Package: "tcp", Name: "TCP", Start: listenDoc, Register: endpointDoc},
	"uds": {Package: "uds", Name: "Unix domain socket", Start: listenDoc, Register: endpointDoc},
	"quic": {Package: "quic", Name: "QUIC", OwnType: true, Start: "binds the server sockets",
		Register: "entry (its endpoints, ports and fingerprint).\n// Nothing is dialed until the first send."},
}

//go:embed front.tmpl
var frontText string

var front = template.Must(template.New("front").Parse(frontText))

// render is the gofmt-ed source of the generated file for package pkg.
func render(pkg string) ([]byte, error) {
	t, ok := targets[pkg]
	if !ok {
		return nil, fmt.Errorf("genfront: unknown package %q", pkg)
	}
	var b bytes.Buffer
	if err := front.Execute(&b, t); err != nil {
		return nil, err
	}
	return format.Source(b.Bytes())
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genfront tcp|uds|quic (writes "+outFile+" in the current directory)")
		os.Exit(2)
	}
	src, err := render(os.Args[1])
	if err == nil {
		err = os.WriteFile(outFile, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
