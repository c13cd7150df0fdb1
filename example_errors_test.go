package velo_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/velo-go/velo"
)

// A handler returns an error with a code; the caller on the other node
// reads the same code and message, as a grpc-go caller reads a status.
// Codes from velo.UserCodeMin up are the application's own.
func ExampleErrorCode() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	err := server.Register(velo.UnaryHandler("user", func(c *velo.Context) ([]byte, error) {
		if len(c.Payload) == 0 {
			return nil, velo.NewError(velo.InvalidArgument, "empty user id")
		}
		return nil, velo.Errorf(velo.NotFound, "no user %q", c.Payload)
	}))
	if err != nil {
		log.Fatal(err)
	}

	_, err = client.Unary(ctx, server.InstanceID(), "user", []byte("ada"))
	fmt.Println(velo.ErrorCode(err))
	var e *velo.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code(), e.Message())
	}
	_, err = client.Unary(ctx, server.InstanceID(), "user", nil)
	fmt.Println(velo.ErrorCode(err) == velo.InvalidArgument)
	fmt.Println(velo.ErrorCode(nil))
	// Output:
	// NotFound
	// NotFound no user "ada"
	// true
	// OK
}

// A sentinel made with NewSentinel keeps its identity across the wire:
// errors.Is holds on the caller, and the call's WithOp names the
// operation in the text instead of the handler.
func ExampleNewSentinel() {
	ctx := context.Background()
	server, client, stop := startPair(ctx)
	defer stop()

	errSoldOut := velo.NewSentinel(velo.FailedPrecondition, "shop_sold_out", "shop: sold out")
	err := server.Register(velo.SyncHandler("shop_buy_v1", func(c *velo.Context) error {
		return fmt.Errorf("%w: %s", errSoldOut, c.Payload)
	}))
	if err != nil {
		log.Fatal(err)
	}

	err = client.Sync(ctx, server.InstanceID(), "shop_buy_v1", []byte("teapot"), velo.WithOp("shop buy"))
	fmt.Println(errors.Is(err, errSoldOut), velo.ErrorCode(err))
	fmt.Println(err)
	// Output:
	// true FailedPrecondition
	// shop buy: sold out: teapot
}
