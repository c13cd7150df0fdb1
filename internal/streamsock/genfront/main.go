// Command genfront writes the public face of a stream-socket transport:
// the Transport type of package tcp or uds, its ext.Transport methods (each
// forwarding to internal/streamsock), Stats and the options both packages
// take. The two packages had the same hundred lines written twice; now one
// template holds them, and each package keeps its own copy so that go doc
// shows the methods and their comments, which promoted methods of an
// embedded type from another package would not.
//
// Run it through go generate in transport/tcp or transport/uds:
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
}

// targets are the packages genfront writes for.
var targets = map[string]target{
	"tcp": {Package: "tcp", Name: "TCP"},
	"uds": {Package: "uds", Name: "Unix domain socket"},
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
		fmt.Fprintln(os.Stderr, "usage: genfront tcp|uds (writes "+outFile+" in the current directory)")
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
