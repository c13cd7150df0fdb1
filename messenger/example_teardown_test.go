package messenger_test

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// A subsystem built on the messenger says its goodbyes in a teardown hook:
// Shutdown runs it after the drain, while the transports still carry what
// it sends, and stops them only after it (or TeardownHookGrace).
func ExampleMessenger_OnTeardown() {
	tr, err := tcp.New()
	if err != nil {
		panic(err)
	}
	m, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		panic(err)
	}
	m.OnTeardown(func() {
		select {
		case <-m.Stopped():
			fmt.Println("hook: the transports are already down")
		default:
			fmt.Println("hook: the transports still run")
		}
	})
	if err := m.Shutdown(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("shut down")
	// Output:
	// hook: the transports still run
	// shut down
}
