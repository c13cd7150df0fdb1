package mux

// The Data bodies a batch hands to anchors must outlive the batch's
// payload, which lies in the transport's read memory and is reused once
// the handler returns. They cannot live in memory this side reuses
// either: a consumer owns what NextBytes returns and may keep it. So the
// ingress copies each body, and only the body (a record's header is read
// here and dropped), into blocks of bodyBlock bytes that it fills in turn
// and then leaves to the anchors and the GC; a table that got no data for
// a watchdog window lets its current block go too (idleLocked).
//
// What a peer can make this side hold: a block is given up only once more
// than bodyBlock-bodyAlone bytes of it are filled, so blocks and lone
// copies come to at most 4/3 of the body bytes the peer sent, plus one
// block per table (TestBodyPackCopies). A body keeps its whole block alive
// while it is kept (a 1-byte token can pin 16 KiB, filled by others), but
// the records waiting in inlets and holds are bounded by the slots' credit
// (32 a slot by default: at most 512 KiB pinned per slot whose consumer
// does not read), and each pins at most one block, where before it
// pinned its whole batch's copy (60 KiB from an honest sender, more from
// another). A truncated record costs nothing: Decode refuses the batch
// before anything is copied.
//
// Before, a batch that carried data was copied whole, headers and all, into
// a buffer of its own size: at delay 0 a batch of an engine's pass is some
// 650 tokens, and each copy was a large (over 32 KiB) heap object of its
// own, 23% of the bytes the in-process response plane allocated. A block
// is a small object of one size class, filled across batches, and a
// consumer that keeps one token keeps at most one block alive (a whole
// batch's copy before).
const (
	bodyBlock = 16 << 10
	// bodyAlone is the largest body packed into a block; a larger one gets
	// an allocation of its own, so that it wastes no block's tail.
	bodyAlone = bodyBlock / 4
)

// bodyPack is an ingress table's current block; it is only used under the
// table's mu.
type bodyPack struct {
	block []byte
	// seen is len(block) at the watchdog's last look (idleLocked).
	seen int
}

// idleLocked lets go of the current block when no body went into it
// since the last call, once per watchdog window. Otherwise a table keeps
// its block for as long as the peer is connected, whether or not a body
// still points into it: 16 KiB for each (peer, lane) that ever carried a
// byte of data, 256 KiB for a peer that sent one on each of the 16 lanes.
// A table that is still busy keeps filling its block.
func (p *bodyPack) idleLocked() {
	if len(p.block) == p.seen {
		p.block = nil
	}
	p.seen = len(p.block)
}

// copyLocked returns a copy of body that no one else writes, capped at its
// length (a consumer's append must not run into the next body).
func (p *bodyPack) copyLocked(body []byte) []byte {
	n := len(body)
	if n > bodyAlone {
		return append([]byte(nil), body...)[:n:n]
	}
	if cap(p.block)-len(p.block) < n {
		p.block = make([]byte, 0, bodyBlock)
	}
	start := len(p.block)
	p.block = append(p.block, body...)
	return p.block[start : start+n : start+n]
}
