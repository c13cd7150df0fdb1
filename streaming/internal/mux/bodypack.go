package mux

// The Data bodies a batch hands to anchors must outlive the batch's
// payload, which lies in the transport's read memory and is reused once
// the handler returns. They cannot live in memory this side reuses
// either: a consumer owns what NextBytes returns and may keep it. So the
// ingress copies each body, and only the body (a record's header is read
// here and dropped), into blocks of bodyBlock bytes that it fills in turn
// and then leaves to the anchors and the GC.
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
type bodyPack struct{ block []byte }

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
