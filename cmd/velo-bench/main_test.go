package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The demo's nodes, embedded servers and streams end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
