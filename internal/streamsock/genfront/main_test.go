package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/uds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The committed transport_gen.go of each package is what the template
// writes today: editing the template without running go generate, or
// editing the generated file by hand, fails here.
func TestGeneratedUpToDate(t *testing.T) {
	for pkg := range targets {
		want, err := render(pkg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "..", "transport", pkg, outFile)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./transport/%s", path, pkg)
		}
	}
}

// Both transports keep the interfaces the node looks for: ext.Transport,
// and ext.OwnerRetainer (saying yes, so pooled buffers go out uncopied).
func TestTransportsKeepInterfaces(t *testing.T) {
	tcpT, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	udsT, err := uds.New()
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]any{"tcp": tcpT, "uds": udsT} {
		if _, ok := tr.(ext.Transport); !ok {
			t.Errorf("%s: not an ext.Transport", name)
		}
		r, ok := tr.(ext.OwnerRetainer)
		if !ok || !r.RetainsOwners() {
			t.Errorf("%s: not an ext.OwnerRetainer that retains owners", name)
		}
	}
	if tcpT.Key() != tcp.Key || udsT.Key() != uds.Key {
		t.Errorf("keys %q, %q; want %q, %q", tcpT.Key(), udsT.Key(), tcp.Key, uds.Key)
	}
}

// The exported method set is exactly ext.Transport's, RetainsOwners,
// ConfirmConn, SendRef (ext.FrameRefSender), Stats and LaneStats, the same for all three, plus TLSConfig for TCP
// and Fingerprint for QUIC (not generated): nothing of streamsock (Kill,
// say) leaks out, and no method names a type from an internal package.
func TestMethodSets(t *testing.T) {
	common := []string{"RetainsOwners", "ConfirmConn", "SendRef", "Stats", "LaneStats"}
	iface := reflect.TypeFor[ext.Transport]()
	for i := range iface.NumMethod() {
		common = append(common, iface.Method(i).Name)
	}
	extra := map[reflect.Type][]string{
		reflect.TypeFor[*tcp.Transport]():  {"TLSConfig"},
		reflect.TypeFor[*quic.Transport](): {"Fingerprint"},
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*tcp.Transport](), reflect.TypeFor[*uds.Transport](), reflect.TypeFor[*quic.Transport]()} {
		want := append(slices.Clone(common), extra[typ]...)
		slices.Sort(want)
		var got []string
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			got = append(got, m.Name)
			for _, p := range signatureTypes(m.Type) {
				if strings.Contains(p.PkgPath(), "/internal/") {
					t.Errorf("%v.%s uses %v from %s", typ, m.Name, p, p.PkgPath())
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%v methods %v, want %v", typ, got, want)
		}
	}
}

// signatureTypes lists the named types a method's parameters and results
// are made of, looking through pointers, slices, maps and channels.
func signatureTypes(fn reflect.Type) []reflect.Type {
	var out []reflect.Type
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
			walk(t.Elem())
			return
		case reflect.Map:
			walk(t.Key())
			walk(t.Elem())
			return
		}
		if t.Name() != "" {
			out = append(out, t)
		}
	}
	for i := range fn.NumIn() {
		walk(fn.In(i))
	}
	for i := range fn.NumOut() {
		walk(fn.Out(i))
	}
	return out
}
