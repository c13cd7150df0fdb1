package hookfn

import (
	"strings"
	"testing"
)

func TestTypedReturnsAMatchingFunction(t *testing.T) {
	f := Typed[func() int]("pkg", "F", func() int { return 7 })
	if f() != 7 {
		t.Fatal("Typed returned another function")
	}
}

func TestTypedPanicsOnAMismatch(t *testing.T) {
	for _, v := range []any{nil, func() string { return "" }} {
		func() {
			defer func() {
				r, _ := recover().(string)
				if !strings.Contains(r, "pkg installed no F of type func() int") {
					t.Fatalf("panic %q, want one naming the owner, the name and the type", r)
				}
			}()
			Typed[func() int]("pkg", "F", v)
		}()
	}
}
