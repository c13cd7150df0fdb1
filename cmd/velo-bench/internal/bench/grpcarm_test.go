package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The grpc arm runs over the socket kind velo runs over: over UDS it
// listens on a Unix socket and the client dials unix://, and stopping the
// server removes the socket.
func TestGRPCArmsServeOverUDS(t *testing.T) {
	for _, serve := range []struct {
		name string
		fn   func(string) (string, func(), error)
	}{{"echo", grpcEchoServer}, {"sink", grpcSinkServer}} {
		t.Run(serve.name, func(t *testing.T) {
			target, stop, err := serve.fn("uds")
			if err != nil {
				t.Fatal(err)
			}
			path, ok := strings.CutPrefix(target, "unix://")
			if !ok {
				stop()
				t.Fatalf("target %q is not a Unix socket", target)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
				stop()
				t.Fatalf("%s is not a socket: %v", path, err)
			}
			cc, err := grpcClient(target)
			if err != nil {
				stop()
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if serve.name == "echo" {
				var resp []byte
				err = grpcCall(ctx, cc, []byte("ping"), &resp)
				if err == nil && string(resp) != "ping" {
					t.Errorf("echo answered %q", resp)
				}
			} else {
				err = grpcSinkStream(ctx, cc, []byte("x"), 10)
			}
			cancel()
			cc.Close()
			stop()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("%s is still there after stop: %v", path, err)
			}
		})
	}
}
