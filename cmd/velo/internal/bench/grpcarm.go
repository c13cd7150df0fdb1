package bench

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
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

// grpcEchoServer starts a grpc-go server whose one unary method echoes.
func grpcEchoServer() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	s.RegisterService(&grpc.ServiceDesc{
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
	}, struct{}{})
	go s.Serve(ln)
	return ln.Addr().String(), s.Stop, nil
}

// grpcClient dials the echo server.
func grpcClient(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
}

func grpcCall(ctx context.Context, cc *grpc.ClientConn, req []byte, resp *[]byte) error {
	return cc.Invoke(ctx, grpcEchoMethod, &req, resp)
}
