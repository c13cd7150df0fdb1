package soak

import (
	"fmt"
	"sort"
	"sync"
)

// The oracle: every item a soak sends is named by a key (one sender's
// sequence: a unary worker, a fire-and-forget epoch, a stream) and a
// sequence number from 0 within it. The sender's Outbox records what it
// tried and what failed with an error; the receiver's Inbox records what
// arrived, intact or not. Check joins the two. An item the sender tried,
// saw no error for and that never arrived is lost; one that arrived twice
// is duplicated; on an ordered key one that arrived after a later one is
// reordered. A failed send excuses its item, and on an ordered key (a
// stream) an error at either end excuses the tail after the last item
// that arrived: the stream ended and both sides were told.

// Kind is what a key's items are, which sets the rules they are held to.
type Kind string

const (
	KindUnary  Kind = "unary"  // every call answers or errors
	KindFire   Kind = "fire"   // fire-and-forget: at most once
	KindToken  Kind = "token"  // a stream's tokens: ordered
	KindStaged Kind = "staged" // a rendezvous payload pulled by handle
)

// SentKey is the sender's record of one key.
type SentKey struct {
	Key  string `json:"k"`
	Kind Kind   `json:"t"`
	// Tried is how many items were sent: seqs 0..Tried-1.
	Tried uint32 `json:"n"`
	// Failed are the seqs whose send returned an error.
	Failed []uint32 `json:"f,omitempty"`
	// Ended says a stream's sender saw an error (its tail is excused).
	Ended bool `json:"e,omitempty"`
	// From and To are the wall-clock unix milliseconds of the first and
	// the last send, for fire-and-forget keys (see Faulty).
	From int64 `json:"a,omitempty"`
	To   int64 `json:"b,omitempty"`
}

// GotKey is the receiver's record of one key.
type GotKey struct {
	Key      string      `json:"k"`
	Seen     [][2]uint32 `json:"s"` // arrived seqs as half-open ranges
	Dups     uint64      `json:"d,omitempty"`
	Reorders uint64      `json:"r,omitempty"`
	Corrupt  uint64      `json:"c,omitempty"`
	// Ended says a stream's reader saw it end with an error.
	Ended bool `json:"e,omitempty"`
}

// Outbox is a sender's side of the ledger; safe for concurrent use.
type Outbox struct {
	mu   sync.Mutex
	keys map[string]*SentKey
}

// NewOutbox returns an empty outbox.
func NewOutbox() *Outbox { return &Outbox{keys: map[string]*SentKey{}} }

func (o *Outbox) key(k string, kind Kind) *SentKey {
	s := o.keys[k]
	if s == nil {
		s = &SentKey{Key: k, Kind: kind}
		o.keys[k] = s
	}
	return s
}

// Tried records that seq of key was sent (whatever came of it), at
// unix-millisecond now.
func (o *Outbox) Tried(k string, kind Kind, seq uint32, now int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.key(k, kind)
	if seq+1 > s.Tried {
		s.Tried = seq + 1
	}
	if s.From == 0 {
		s.From = now
	}
	s.To = now
}

// Failed records that the send of seq returned an error.
func (o *Outbox) Failed(k string, kind Kind, seq uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.key(k, kind)
	s.Failed = append(s.Failed, seq)
}

// End records that a stream's sender saw an error.
func (o *Outbox) End(k string, kind Kind) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.key(k, kind).Ended = true
}

// Keys returns a copy of every key's record.
func (o *Outbox) Keys() []SentKey {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]SentKey, 0, len(o.keys))
	for _, s := range o.keys {
		c := *s
		c.Failed = append([]uint32(nil), s.Failed...)
		out = append(out, c)
	}
	return out
}

// gotKey is the receiver's live state of one key: a bitmap of the seqs.
type gotKey struct {
	bits     []uint64
	last     int64 // highest seq so far, -1 before the first
	dups     uint64
	reorders uint64
	corrupt  uint64
	ended    bool
}

// Inbox is a receiver's side of the ledger; safe for concurrent use.
type Inbox struct {
	mu   sync.Mutex
	keys map[string]*gotKey
}

// NewInbox returns an empty inbox.
func NewInbox() *Inbox { return &Inbox{keys: map[string]*gotKey{}} }

func (in *Inbox) key(k string) *gotKey {
	g := in.keys[k]
	if g == nil {
		g = &gotKey{last: -1}
		in.keys[k] = g
	}
	return g
}

// Got records the arrival of seq of key; intact says its checksum held.
// A corrupt item counts as corrupt, not as arrived.
func (in *Inbox) Got(k string, seq uint32, intact bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := in.key(k)
	if !intact {
		g.corrupt++
		return
	}
	w, b := seq/64, seq%64
	for uint32(len(g.bits)) <= w {
		g.bits = append(g.bits, 0)
	}
	if g.bits[w]&(1<<b) != 0 {
		g.dups++
		return
	}
	g.bits[w] |= 1 << b
	if int64(seq) < g.last {
		g.reorders++
	} else {
		g.last = int64(seq)
	}
}

// End records that a stream's reader saw it end with an error.
func (in *Inbox) End(k string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.key(k).ended = true
}

// Count is how many intact items of key arrived.
func (in *Inbox) Count(k string) uint32 {
	in.mu.Lock()
	defer in.mu.Unlock()
	g := in.keys[k]
	if g == nil {
		return 0
	}
	var n uint32
	for _, w := range g.bits {
		n += uint32(popcount(w))
	}
	return n
}

func popcount(w uint64) int {
	n := 0
	for ; w != 0; w &= w - 1 {
		n++
	}
	return n
}

// Keys returns every key's record, its seqs as ranges.
func (in *Inbox) Keys() []GotKey {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]GotKey, 0, len(in.keys))
	for k, g := range in.keys {
		out = append(out, GotKey{Key: k, Seen: ranges(g.bits), Dups: g.dups, Reorders: g.reorders, Corrupt: g.corrupt, Ended: g.ended})
	}
	return out
}

// ranges turns a bitmap into half-open ranges of set bits.
func ranges(bits []uint64) [][2]uint32 {
	var out [][2]uint32
	open := false
	var start uint32
	for i := uint32(0); i < uint32(len(bits))*64; i++ {
		set := bits[i/64]&(1<<(i%64)) != 0
		switch {
		case set && !open:
			start, open = i, true
		case !set && open:
			out = append(out, [2]uint32{start, i})
			open = false
		}
	}
	if open {
		out = append(out, [2]uint32{start, uint32(len(bits)) * 64})
	}
	return out
}

// Verdict is what Check found, by kind of item.
type Verdict struct {
	Items     map[Kind]uint64 `json:"items"`     // arrived intact
	Lost      map[Kind]uint64 `json:"lost"`      // tried, no error, never arrived
	Dups      map[Kind]uint64 `json:"dups"`      // arrived more than once
	Reordered map[Kind]uint64 `json:"reordered"` // out of order on an ordered key
	Corrupt   map[Kind]uint64 `json:"corrupt"`   // arrived with a bad checksum
	Excused   map[Kind]uint64 `json:"excused"`   // never arrived, an error said so
	// FaultDropped are fire-and-forget items that never arrived, sent
	// while a fault that discards bytes was on (see Faulty): at most once
	// allows them, and no sender could have known.
	FaultDropped uint64 `json:"fault_dropped"`
	// Unknown are received keys no sender knows: always a failure.
	Unknown uint64 `json:"unknown"`
	// Examples are a few of the failures, for the report.
	Examples []string `json:"examples,omitempty"`
}

// Failed says whether v holds any loss, duplicate, reorder or corruption.
func (v Verdict) Failed() bool {
	return sum(v.Lost)+sum(v.Dups)+sum(v.Reordered)+sum(v.Corrupt)+v.Unknown > 0
}

func sum(m map[Kind]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// Faulty says whether unix-millisecond window [from, to] overlaps a
// fault that can discard bytes in flight; nil means none ever did.
type Faulty func(from, to int64) bool

// Check joins every sender's keys with every receiver's and returns the
// verdict.
func Check(sent []SentKey, got []GotKey, faulty Faulty) Verdict {
	v := Verdict{Items: map[Kind]uint64{}, Lost: map[Kind]uint64{}, Dups: map[Kind]uint64{},
		Reordered: map[Kind]uint64{}, Corrupt: map[Kind]uint64{}, Excused: map[Kind]uint64{}}
	recv := make(map[string]GotKey, len(got))
	for _, g := range got {
		if _, dup := recv[g.Key]; dup {
			v.Unknown++
			v.example("key %s reported by two receivers", g.Key)
		}
		recv[g.Key] = g
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].Key < sent[j].Key })
	for _, s := range sent {
		g, ok := recv[s.Key]
		delete(recv, s.Key)
		v.checkKey(s, g, ok, faulty)
	}
	for k, g := range recv {
		// A stream whose request never reached its producer ends at
		// its reader with nothing on it: no item, so nothing unknown.
		if len(g.Seen) == 0 && g.Dups == 0 && g.Corrupt == 0 {
			continue
		}
		v.Unknown++
		v.example("key %s arrived but no sender sent it", k)
	}
	return v
}

func (v *Verdict) checkKey(s SentKey, g GotKey, ok bool, faulty Faulty) {
	seen := func(seq uint32) bool { return inRanges(g.Seen, seq) }
	if !ok {
		seen = func(uint32) bool { return false }
	}
	failed := make(map[uint32]bool, len(s.Failed))
	for _, f := range s.Failed {
		failed[f] = true
	}
	// The tail after the last arrival that an error at either end of a
	// stream excuses.
	tail := uint32(0)
	if n := len(g.Seen); n > 0 {
		tail = g.Seen[n-1][1]
	}
	streamEnded := s.Ended || g.Ended
	var lost uint64
	for seq := uint32(0); seq < s.Tried; seq++ {
		switch {
		case seen(seq):
			v.Items[s.Kind]++
		case failed[seq], streamEnded && seq >= tail:
			v.Excused[s.Kind]++
		case s.Kind == KindFire && faulty != nil && faulty(s.From, s.To):
			v.FaultDropped++
		default:
			lost++
			if lost == 1 {
				v.example("%s item %s/%d lost (tried %d)", s.Kind, s.Key, seq, s.Tried)
			}
		}
	}
	v.Lost[s.Kind] += lost
	if n := len(g.Seen); n > 0 && g.Seen[n-1][1] > s.Tried {
		v.Unknown += uint64(g.Seen[n-1][1] - s.Tried)
		v.example("key %s: seqs up to %d arrived, %d sent", s.Key, g.Seen[n-1][1], s.Tried)
	}
	v.Dups[s.Kind] += g.Dups
	v.Corrupt[s.Kind] += g.Corrupt
	if s.Kind == KindToken {
		v.Reordered[s.Kind] += g.Reorders
		if g.Reorders > 0 {
			v.example("stream %s: %d tokens out of order", s.Key, g.Reorders)
		}
	}
	if g.Dups > 0 {
		v.example("key %s: %d duplicates", s.Key, g.Dups)
	}
	if g.Corrupt > 0 {
		v.example("key %s: %d corrupt", s.Key, g.Corrupt)
	}
}

func inRanges(rs [][2]uint32, seq uint32) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i][1] > seq })
	return i < len(rs) && rs[i][0] <= seq
}

func (v *Verdict) example(format string, args ...any) {
	if len(v.Examples) < 8 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}
