package storetest_test

import (
	"testing"

	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestInMemoryConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{New: func(t testing.TB, o storetest.Options) store.Store {
		s, err := store.NewInMemoryStore(store.WithTTL(o.TTL), store.WithClock(o.Now))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

func TestFaultStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{New: func(t testing.TB, o storetest.Options) store.Store {
		s, err := storetest.NewFaultStore(store.WithTTL(o.TTL), store.WithClock(o.Now))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}
