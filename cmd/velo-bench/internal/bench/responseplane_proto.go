package bench

import (
	"fmt"
	"strconv"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// The protocol of a --procs run. Each child is this binary again, started by the
// parent (responseplane_procs.go) as `response-plane --rp-role R
// --rp-index I --rp-arm A`: one frontend or one engine of one arm, with
// one node of its half of the plane. It talks with the parent in JSON
// lines, stdin in, stdout out (rpMsg), in this order:
//
//	parent → child   child → parent
//	config           hello     the child's half is up: for each of its nodes the PeerInfo, listen address, control address
//	peers            ready     the other side's hellos, by index: registered, dialed
//	start            started   window start: CPU, writes and wakes taken; a frontend starts dispatching
//	                 finished  a frontend: every response it owns was read whole
//	stop             report    window end (after every frontend finished): what it measured
//	exit                       shut down and exit
//
// A child holds Engines/EngineProcs engines or AnchorHosts/FrontendProcs
// frontends, the ones whose global indexes follow from its own: child p
// of k nodes holds p*k .. p*k+k-1. In a closed loop, start carries the
// window on the wall clock and each child takes its CPU at its two ends
// itself; a frontend dispatches until the window's end, drains, and then
// says finished.
//
// A child that fails says "error" and exits; the parent kills the rest.
// Requests cross from frontend to engine over a TCP control connection
// the engine listens on: one JSON line per request (rpDispatch), written
// by the frontend right after it opened the request's stream.

// rpMsg is one line of the parent–child protocol.
type rpMsg struct {
	Op     string               `json:"op"`
	Err    string               `json:"err,omitempty"`
	Config *ResponsePlaneConfig `json:"config,omitempty"`
	// Hellos are a hello's, one for each node of the child, by its index
	// on the child's side.
	Hellos []rpHello `json:"hellos,omitempty"`
	// Window is a closed loop's measured window, [start, end) in Unix
	// nanoseconds, sent with start.
	Window []int64        `json:"window,omitempty"`
	Peers  []rpHello      `json:"peers,omitempty"`
	Report *rpChildReport `json:"report,omitempty"`
}

// rpHello is what the other side needs to reach a child.
type rpHello struct {
	PID int `json:"pid"`
	// Peer is a velo node's PeerInfo (the velo arms).
	Peer *ext.PeerInfo `json:"peer,omitempty"`
	// Addr is an engine's gRPC listener (grpc) or a frontend's raw
	// listener (raw).
	Addr string `json:"addr,omitempty"`
	// Ctl is an engine's control listener, where requests arrive.
	Ctl string `json:"ctl,omitempty"`
}

// rpChildReport is what a child measured over the window.
type rpChildReport struct {
	CPUNS  int64   `json:"cpu_ns"`
	Writes uint64  `json:"writes"`
	Wakes  rpWakes `json:"wakes"`
	// Sys is the process's read and write system calls and context
	// switches over the window.
	Sys rpSyscalls `json:"sys"`
	// Requests: a frontend's responses read whole, an engine's requests
	// served to their last token.
	Requests int `json:"requests"`
	// A frontend's window on the wall clock: the first dispatch and the
	// last response read whole (Unix nanoseconds).
	T0 int64 `json:"t0,omitempty"`
	T1 int64 `json:"t1,omitempty"`
	// A frontend's latencies (nanoseconds), its requests in index order.
	TTFT   []int64 `json:"ttft,omitempty"`
	TokLat []int64 `json:"tok_lat,omitempty"`
	// Attaches is the _anchor_attach requests an engine sent.
	Attaches uint64 `json:"attaches"`
	// Load is a frontend's closed loop (Concurrency > 0).
	Load *rpLoadSummary `json:"load,omitempty"`
}

// rpDispatch is one request on a control connection: its index and, for
// the velo arms, the anchor to bind (and the ticket, mux-zero-rtt).
type rpDispatch struct {
	I      int                    `json:"i"`
	Handle *wire.AnchorHandle     `json:"h,omitempty"`
	Ticket *wire.StreamOpenTicket `json:"t,omitempty"`
}

// appendDispatch appends request i's control line: req is what the
// frontend half's open returned.
func appendDispatch(dst []byte, i int, req any) []byte {
	dst = strconv.AppendInt(append(dst, `{"i":`...), int64(i), 10)
	switch r := req.(type) {
	case wire.AnchorHandle:
		dst = r.AppendJSON(append(dst, `,"h":`...))
	case rpTicketed:
		dst = r.handle.AppendJSON(append(dst, `,"h":`...))
		dst = r.ticket.AppendJSON(append(dst, `,"t":`...))
	}
	return append(dst, "}\n"...)
}

// engineReq is what the engine half's bind takes for d.
func (d rpDispatch) engineReq(cfg ResponsePlaneConfig, arm string) (any, error) {
	switch arm {
	case "grpc":
		return uint64(d.I), nil
	case "raw":
		return rawReq{id: uint64(d.I), front: d.I % cfg.AnchorHosts}, nil
	}
	if d.Handle == nil {
		return nil, fmt.Errorf("request %d: no anchor handle", d.I)
	}
	if a, _ := veloArmOf(cfg, arm); a.zeroRTT {
		if d.Ticket == nil {
			return nil, fmt.Errorf("request %d: no ticket", d.I)
		}
		return rpTicketed{handle: *d.Handle, ticket: *d.Ticket}, nil
	}
	return *d.Handle, nil
}
