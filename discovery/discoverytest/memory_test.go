package discoverytest_test

import (
	"testing"

	"github.com/velo-go/velo/discovery/discoverytest"
	"github.com/velo-go/velo/ext"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	d := discoverytest.NewMemory()
	discoverytest.RunPeer(t, func(*testing.T) ext.PeerDiscovery { return d })
}

func TestMemoryNodes(t *testing.T) {
	d := discoverytest.NewMemory()
	discoverytest.RunNodes(t, func(*testing.T) ext.PeerDiscovery { return d })
}
