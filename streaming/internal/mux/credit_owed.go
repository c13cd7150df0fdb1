package mux

import "github.com/velo-go/velo/internal/muxwire"

// CreditOwed is the credit a batcher owes its peer, one entry per slot,
// coalesced. It was a map; a frontend's reply pass writes an entry for
// every stream of a forward pass and the next batch reads them all back,
// and the map's hashing, iteration and clearing were a sixth of the
// frontend's ingress work per token (BenchmarkFrontPass16). Here the
// entries are a list, in the order they were first owed, found through a
// table by slot index: no hash and no iteration over empty buckets. It is
// used under the batcher's mu.
//
// Two generations of one slot index can be owed at once (a stream ended
// and its index was reused before the reply went). The table then names
// only the newest; shared makes lookups fall back to a scan of the list
// until the list is next emptied.
type CreditOwed struct {
	list   []SlotCredit
	at     []int32 // by slot index: 1 + the entry's position in list, 0 for none
	shared bool
}

// Len is the number of slots owed credit.
func (c *CreditOwed) Len() int { return len(c.list) }

// All is the entries, for the caller to read (not to keep).
func (c *CreditOwed) All() []SlotCredit { return c.list }

// find is id's position in the list, or -1.
func (c *CreditOwed) find(id muxwire.SlotID) int {
	if idx := int(id.Index()); idx < len(c.at) {
		if p := int(c.at[idx]) - 1; p >= 0 && c.list[p].ID == id {
			return p
		}
	}
	if c.shared {
		for p, e := range c.list {
			if e.ID == id {
				return p
			}
		}
	}
	return -1
}

// Get is the credit owed for id.
func (c *CreditOwed) Get(id muxwire.SlotID) uint32 {
	if p := c.find(id); p >= 0 {
		return c.list[p].Delta
	}
	return 0
}

// Add owes delta more for id.
func (c *CreditOwed) Add(id muxwire.SlotID, delta uint32) {
	if p := c.find(id); p >= 0 {
		c.list[p].Delta += delta
		return
	}
	idx := int(id.Index())
	if idx >= len(c.at) {
		c.at = append(c.at, make([]int32, idx+1-len(c.at))...)
	}
	if c.at[idx] != 0 {
		c.shared = true // another generation of the index is owed too
	}
	c.list = append(c.list, SlotCredit{id, delta})
	c.at[idx] = int32(len(c.list))
}

// Delete drops what is owed for id (a close supersedes it).
func (c *CreditOwed) Delete(id muxwire.SlotID) {
	p := c.find(id)
	if p < 0 {
		return
	}
	if idx := id.Index(); c.at[idx] == int32(p+1) {
		c.at[idx] = 0
	}
	last := len(c.list) - 1
	if p != last {
		moved := c.list[last]
		c.list[p] = moved
		if idx := moved.ID.Index(); c.at[idx] == int32(last+1) {
			c.at[idx] = int32(p + 1)
		}
	}
	c.list = c.list[:last]
}

// Clear empties the list, keeping its memory for the next pass.
func (c *CreditOwed) Clear() {
	for _, e := range c.list {
		c.at[e.ID.Index()] = 0
	}
	c.list = c.list[:0]
	c.shared = false
}

// dropFirst takes the first n entries off the list (a batch had room for
// only those). It is rare: a credit batch holds up to MaxRecords slots.
func (c *CreditOwed) dropFirst(n int) {
	rest := append([]SlotCredit(nil), c.list[n:]...)
	c.Clear()
	for _, e := range rest {
		c.Add(e.ID, e.Delta)
	}
}

// take moves the list out, leaving c empty with no memory: a batcher
// handing what it owes on to a successor.
func (c *CreditOwed) take() []SlotCredit {
	l := c.list
	*c = CreditOwed{}
	return l
}
