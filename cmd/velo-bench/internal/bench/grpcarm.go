package bench

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// rawCodec lets grpc-go carry plain bytes, so the comparison arm pays no
// protobuf cost: velo's payloads are bytes too.
type rawCodec struct{}

func (rawCodec) Name() string { return "velo-bench-raw" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func init() { encoding.RegisterCodec(rawCodec{}) }

const grpcEchoMethod = "/velo.bench.Echo/Echo"

// grpcEchoServer starts a grpc-go server whose one unary method echoes,
// on the kind of socket velo runs over (see grpcServe).
func grpcEchoServer(kind string) (target string, stop func(), err error) {
	return grpcServe(kind, &grpc.ServiceDesc{
		ServiceName: "velo.bench.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return &in, nil
			},
		}},
	})
}

// grpcServe starts a grpc-go server with the raw-bytes codec and one
// service, listening on the kind of socket velo runs over ("tcp": loopback
// TCP, "uds": a Unix socket), so that grpc and velo cross the same kernel
// path. It returns the target a client dials (for a Unix socket,
// unix:///path) and a stop function that waits for Serve to return and
// removes the socket's directory.
func grpcServe(kind string, desc *grpc.ServiceDesc) (target string, stop func(), err error) {
	ln, cleanup, err := listen(kind)
	if err != nil {
		return "", nil, err
	}
	target = ln.Addr().String()
	if kind == "uds" {
		target = "unix://" + target
	}
	sopts := []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{})}
	if kind == "tls" {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(benchTLS())))
	}
	s := grpc.NewServer(sopts...)
	s.RegisterService(desc, struct{}{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.Serve(ln)
	}()
	return target, func() {
		s.Stop()
		<-served
		cleanup()
	}, nil
}

// grpcClient dials a server of grpcServe over plain TCP or a Unix socket.
func grpcClient(target string) (*grpc.ClientConn, error) { return grpcClientOver("tcp", target) }

// grpcClientOver dials a server of grpcServe(kind): with kind "tls", over
// mutual TLS with the run's certificates.
func grpcClientOver(kind, target string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if kind == "tls" {
		creds = credentials.NewTLS(benchTLS())
	}
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
}

func grpcCall(ctx context.Context, cc *grpc.ClientConn, req []byte, resp *[]byte) error {
	return cc.Invoke(ctx, grpcEchoMethod, &req, resp)
}
