package zmq

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-zeromq/zmq4"
	zmqtransport "github.com/go-zeromq/zmq4/transport"
)

// The DEALER sockets dial through a zmq4 transport of this package's, so
// that what a peer's ROUTER sends back passes the same guard as inbound
// connections: zmq4 would otherwise allocate whatever size a frame
// declares. The cap travels in the address ("velo.zmq.tcp://CAP@host:port"),
// since zmq4's registry of transports is global and a transport's cap is
// its own.
const (
	guardedTCP = "velo.zmq.tcp"
	guardedIPC = "velo.zmq.ipc"
)

func init() {
	for name, network := range map[string]string{guardedTCP: "tcp", guardedIPC: "unix"} {
		if err := zmq4.RegisterTransport(name, guardedTransport{network: network}); err != nil {
			panic(err)
		}
	}
}

type guardedTransport struct{ network string }

func (g guardedTransport) Dial(ctx context.Context, d zmqtransport.Dialer, addr string) (net.Conn, error) {
	capText, target, ok := strings.Cut(addr, "@")
	limit, err := strconv.ParseUint(capText, 10, 63)
	if !ok || err != nil {
		return nil, fmt.Errorf("zmq: guarded address %q", addr)
	}
	c, err := d.DialContext(ctx, g.network, target)
	if err != nil {
		return nil, err
	}
	return newGuard(c, limit, true), nil
}

func (g guardedTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, fmt.Errorf("zmq: %s is for dialling only", g.network)
}

func (guardedTransport) Addr(ep string) (string, error) { return ep, nil }

// guardedEndpoint is the address a DEALER dials to reach endpoint with
// frames capped at max.
func guardedEndpoint(endpoint string, max int) string {
	limit := strconv.Itoa(max + 64)
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		return guardedTCP + "://" + limit + "@" + rest
	}
	return guardedIPC + "://" + limit + "@" + strings.TrimPrefix(endpoint, "ipc://")
}
