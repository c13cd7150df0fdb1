package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/tcp"
)

// A rogue is an ordinary peer with its own identity: a bare messenger
// over TCP, with none of velo's subsystems, that greets the victim and
// then speaks the protocol by hand. It is for attacks that need answers
// (a guess is only worth something if the owner answers it) or a real
// attach, which a raw connection cannot get.

// newRogue starts a bare messenger, lets setup register its handlers
// before it greets the victim, then greets it.
func newRogue(ctx context.Context, victim ext.PeerInfo, setup func(*messenger.Messenger) error) (*messenger.Messenger, error) {
	tr, err := tcp.New()
	if err != nil {
		return nil, err
	}
	m, err := messenger.New(ctx, messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		return nil, err
	}
	if setup != nil {
		if err := setup(m); err != nil {
			stopRogue(m)
			return nil, err
		}
	}
	if err := m.RegisterPeer(victim); err != nil {
		stopRogue(m)
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := msgrx.Handshake(m, hctx, victim.InstanceID); err != nil {
		stopRogue(m)
		return nil, fmt.Errorf("rogue handshake: %w", err)
	}
	return m, nil
}

func stopRogue(m *messenger.Messenger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.Shutdown(ctx)
}

// fence returns once the victim has handled everything m sent it before:
// a unary call on the same connection, which the victim reads in order.
func fence(ctx context.Context, m *messenger.Messenger, victim ext.InstanceID) error {
	_, err := m.Unary(ctx, victim, "_list_handlers", nil)
	return err
}

// rogueAttach attaches m to the victim's anchor h as a real producer
// would (_anchor_attach, offering only the mux) and returns the routing
// session and credit of the answer.
func rogueAttach(ctx context.Context, m *messenger.Messenger, victim ext.InstanceID, h wire.AnchorHandle) (session uint64, credit uint32, err error) {
	req := wire.AttachRequest{
		Handle:                 h,
		SessionID:              7,
		CancelHandle:           wire.CancelHandle{Hi: uint64(m.WorkerID()), Lo: 7},
		SupportedTransportKeys: []string{"messenger-mux-v2"},
	}
	raw, err := m.Unary(ctx, victim, wire.AnchorAttachHandler, req.AppendJSON(nil))
	if err != nil {
		return 0, 0, err
	}
	ans, err := wire.DecodeAttachResponse(raw)
	if err != nil {
		return 0, 0, err
	}
	if ans.Refused || ans.TransportKey != "messenger-mux-v2" {
		return 0, 0, fmt.Errorf("the victim answered %+v, want the mux", ans)
	}
	return ans.RoutingSessionID, ans.InitialCredit, nil
}

// acquireAnswer is the part of an _rv_acquire answer a thief needs.
type acquireAnswer struct {
	Ready *struct {
		LeaseID    uint64 `json:"lease_id"`
		TransferID uint64 `json:"transfer_id"`
		TotalLen   uint64 `json:"total_len"`
		ChunkCount uint32 `json:"chunk_count"`
	}
}

// hostileOwner is the rendezvous side of a peer that lies about a staged
// payload: its acquire answers a stated size, its pulls hand over
// realChunks chunks of zeros and then fail. Its stager names a handle of
// its own on every request, so a request from it is a staged one.
type hostileOwner struct {
	stated     uint64
	realChunks int64
	pulls      atomic.Int64
}

func (h *hostileOwner) setup(m *messenger.Messenger) error {
	chunks := (h.stated + rendezvous.ChunkSize - 1) / rendezvous.ChunkSize
	answer, _ := json.Marshal(map[string]any{"Ready": map[string]any{
		"lease_id": 1, "transfer_id": 1, "total_len": h.stated,
		"chunk_size": rendezvous.ChunkSize, "chunk_count": chunks,
	}})
	zeros := make([]byte, rendezvous.ChunkSize)
	for _, hd := range []messenger.Handler{
		messenger.UnaryHandler(rendezvous.HandlerAcquire, func(*messenger.Context) ([]byte, error) { return answer, nil }, messenger.WithInline()),
		messenger.UnaryHandler(rendezvous.HandlerPull, func(*messenger.Context) ([]byte, error) {
			if h.pulls.Add(1) > h.realChunks {
				return nil, errors.New("gone")
			}
			return zeros, nil
		}, messenger.WithInline()),
		messenger.FireHandler(rendezvous.HandlerDetach, func(*messenger.Context) {}, messenger.WithInline()),
		messenger.FireHandler(rendezvous.HandlerRelease, func(*messenger.Context) {}, messenger.WithInline()),
		messenger.FireHandler(rendezvous.HandlerLeaseRenew, func(*messenger.Context) {}, messenger.WithInline()),
	} {
		if err := msgrx.RegisterSystem(m, hd); err != nil {
			return err
		}
	}
	return nil
}

// stageAll makes every later request of m a staged one, under a handle m
// answers for with its lies. It is installed after the handshake, whose
// own body must reach the victim.
func (h *hostileOwner) stageAll(m *messenger.Messenger) {
	msgrx.SetStager(m, &lyingStager{handle: U128(uint64(m.WorkerID()), 1)})
}

// lyingStager stages every payload under one handle it never holds.
type lyingStager struct{ handle string }

func (s *lyingStager) Threshold() int { return 0 }
func (s *lyingStager) Stage([]byte, time.Duration) (string, error) {
	return s.handle, nil
}
func (s *lyingStager) Discard(string) {}
func (s *lyingStager) Fetch(context.Context, string, bool) ([]byte, error) {
	return nil, errors.New("this peer fetches nothing")
}
func (s *lyingStager) FetchTimeout() time.Duration { return 0 }
