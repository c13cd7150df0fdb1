package framepath

import (
	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The registry of this node's producer streams, by the stream id of the
// cancel handle each sent in its attach: what the consumer's _stream_stop
// and _stream_cancel name.

// Register enters s in the registry. The attach does it before its
// request leaves: the owner may send a stop or a cancel (one made before
// this attach) before its answer arrives.
func (n *Node) Register(s *Stream) {
	n.streamsMu.Lock()
	n.streams[s.id] = s
	n.streamsMu.Unlock()
}

// Unregister takes s out of the registry, if it is there: the attach
// failed, or went to the mux, which signals its slot instead.
func (n *Node) Unregister(s *Stream) {
	n.streamsMu.Lock()
	if n.streams[s.id] == s {
		delete(n.streams, s.id)
	}
	n.streamsMu.Unlock()
}

// signalled finds the stream a control message names. Only the anchor's
// owner may signal it: the stream id is random, and the messenger stamps
// each request with its sender's worker as well.
func (n *Node) signalled(from ext.WorkerID, payload []byte) *Stream {
	req, err := wire.DecodeStreamCancelRequest(payload)
	if err != nil {
		return nil
	}
	n.streamsMu.Lock()
	s := n.streams[req.SenderStreamID]
	n.streamsMu.Unlock()
	if s == nil {
		return nil
	}
	if s.handle.Owner() != from {
		n.strangerSignals.Add(1)
		return nil
	}
	return s
}

// ActiveStreams counts this node's producer streams that a stop or cancel
// can still reach: attaching or streaming.
func (n *Node) ActiveStreams() int {
	n.streamsMu.Lock()
	defer n.streamsMu.Unlock()
	return len(n.streams)
}

// consumerLost fails this node's streams to anchors of w, whose node is
// gone.
func (n *Node) consumerLost(w ext.WorkerID) {
	var lost []*Stream
	n.streamsMu.Lock()
	for _, s := range n.streams {
		if s.handle.Owner() == w {
			lost = append(lost, s)
		}
	}
	n.streamsMu.Unlock()
	for _, s := range lost {
		s.fail(streamerr.ErrConsumerLost)
	}
}
