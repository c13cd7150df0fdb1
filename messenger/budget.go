package messenger

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"time"

	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/msgwire"
)

// The caller's deadline on the wire.
//
// A call whose context has a deadline sends it in one request header,
// DeadlineHeader, whose value is two decimal numbers and a space between
// them: the microseconds left when the request was built (rounded down),
// and the deadline itself as Unix microseconds. The first survives any
// clock skew between the hosts; alone it would give the handler the
// transit on top (its deadline would be the caller's plus the time the
// request travelled). The second lets a handler whose clock agrees with
// the caller's take the caller's deadline as it is, the transit already
// spent. A handler trusts the second for at most maxSkewCut: a clock
// ahead of the caller's by more cannot cut the handler's time by more.
//
// The reference (ai-dynamo/velo) has no such header and ignores headers it
// does not know, so a Rust handler runs without a deadline and a Rust
// caller sends none. The header is written straight into the request
// header's buffer, so a call with a deadline allocates nothing more than
// one without.

// maxSkewCut bounds how much earlier than arrival plus budget a handler's
// deadline may be made by the caller's absolute deadline.
const maxSkewCut = 25 * time.Millisecond

// maxBudget caps the remaining time sent: 15 decimal digits of
// microseconds (about three years), so the value fits its bound below.
const maxBudget = 999_999_999_999_999 * time.Microsecond

// deadlineEntryMax is the most that the deadline entry adds to a header
// map: the map's count may grow from one byte to three, then the key and
// a str8 value of two numbers of at most 15 and 16 digits and a space
// (Unix microseconds keep to 16 digits until the year 2286).
const deadlineEntryMax = 2 + (1 + len(msgwire.DeadlineHeader)) + (2 + 15 + 1 + 16)

// deadlineKey is the MessagePack form of DeadlineHeader as a map key: a
// cheap test that rules the header out for most requests before any
// decoding.
var deadlineKey = append([]byte{0xa0 | byte(len(msgwire.DeadlineHeader))}, msgwire.DeadlineHeader...)

// deadlineKeyStr is deadlineKey as a constant, which the reader compares
// against: against a constant of at most 16 bytes the compiler compares a
// few words in line, where bytes.HasPrefix calls memequal (3 of the 14 ns
// a pipelined request spent in byte comparisons on the reader).
const deadlineKeyStr = "\xae" + msgwire.DeadlineHeader

// The fixstr byte above is 0xa0 | 14: a DeadlineHeader of another length
// fails to compile here.
var _ = [1]struct{}{}[len(msgwire.DeadlineHeader)-14]

// hasDeadlineKey reports whether b starts with deadlineKey.
func hasDeadlineKey(b []byte) bool {
	return len(b) >= len(deadlineKeyStr) && string(b[:len(deadlineKeyStr)]) == deadlineKeyStr
}

// appendRequestHeaderDeadline is appendRequestHeader with the deadline dl
// added to the header map hb (as EncodeHeaders writes it). A zero dl, or a
// map that has no room for the entry, adds nothing.
func appendRequestHeaderDeadline(dst []byte, rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb []byte, dl time.Time) []byte {
	return appendRequestHeaderDigits(dst, rt, id, handler, hb, dl, nil)
}

// deadlineDigits remembers the digits of the last deadline entry written
// in a request buffer (sendBuf): a caller's requests under one context all
// carry the same absolute deadline, and requests sent back to back mostly
// the same microseconds left. Their digits were half the cost of writing
// the entry (the clock's reading is most of the rest).
type deadlineDigits struct {
	left, wall lastDecimal
	// leftAt is where left's digits start in the header last written with
	// these digits, or 0 when it had no deadline entry.
	leftAt int
}

// lastDecimal is one number's digits, as appendDecimal wrote them.
type lastDecimal struct {
	x      uint64
	n      uint8 // 0: nothing remembered
	digits [16]byte
}

// appendDecimal is appendDecimal(dst, x), the digits taken from l when
// it holds x's. A nil l remembers nothing. x must be below 1e16.
func (l *lastDecimal) appendDecimal(dst []byte, x uint64) []byte {
	if l == nil {
		return appendDecimal(dst, x)
	}
	switch {
	case l.n != 0 && l.x == x:
	case l.n != 0 && x < l.x && l.x-x <= l.x%10:
		// A little less time left than the last request had, most often:
		// only the last digit goes down, and no digit before it.
		l.digits[l.n-1] -= byte(l.x - x)
		l.x = x
	default:
		l.x, l.n = x, uint8(copy(l.digits[:], appendDecimal(l.digits[:0], x)))
	}
	return append(dst, l.digits[:l.n]...)
}

// appendRequestHeaderDigits is appendRequestHeaderDeadline that takes the
// digits from dd where it holds them (nil: nothing remembered).
func appendRequestHeaderDigits(dst []byte, rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb []byte, dl time.Time, dd *deadlineDigits) []byte {
	dst0 := dst
	if dd != nil {
		dd.leftAt = 0
	}
	n, body, ok := mapEntries(hb)
	if dl.IsZero() || !ok || n+1 > 0xffff || len(hb)+deadlineEntryMax > msgwire.MaxEncodedHeaders {
		return appendRequestHeader(dst, rt, id, handler, hb)
	}
	left := budgetMicros(dl)
	dst = append(dst, headerSchema, byte(rt))
	dst = id.AppendLE(dst)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(handler)))
	dst = append(dst, handler...)
	lenAt := len(dst)
	dst = append(dst, 0, 0)
	start := len(dst)
	if n+1 < 16 {
		dst = append(dst, 0x80|byte(n+1))
	} else {
		dst = binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n+1))
	}
	dst = append(dst, deadlineKey...)
	dst = append(dst, 0xd9, 0)
	valAt := len(dst)
	var lastLeft, lastWall *lastDecimal
	if dd != nil {
		lastLeft, lastWall = &dd.left, &dd.wall
		dd.leftAt = valAt - len(dst0)
	}
	dst = lastLeft.appendDecimal(dst, left) // maxBudget: 15 digits
	if wall := dl.UnixMicro(); wall >= 0 && wall < 1e16 {
		dst = lastWall.appendDecimal(append(dst, ' '), uint64(wall))
	}
	dst[valAt-1] = byte(len(dst) - valAt)
	dst = append(dst, body...)
	binary.LittleEndian.PutUint16(dst[lenAt:], uint16(len(dst)-start))
	return dst
}

// budgetMicros is the time left until dl in whole microseconds (rounded
// down), within [0, maxBudget]: the first number of the deadline entry.
func budgetMicros(dl time.Time) uint64 {
	return uint64(min(max(time.Until(dl), 0), maxBudget) / time.Microsecond)
}

// appendDecimal appends x in decimal, eight digits at a time below 1e16
// (every number the deadline entry holds): strconv's digit pairs were a
// twentieth of a small message's cost to send.
func appendDecimal(dst []byte, x uint64) []byte {
	switch {
	case x < 1e8:
		return appendDigits8(dst, x, true)
	case x < 1e16:
		return appendDigits8(appendDigits8(dst, x/1e8, true), x%1e8, false)
	}
	return strconv.AppendUint(dst, x, 10)
}

// appendDigits8 appends x (below 1e8) as eight digits, or without its
// leading zeros (but one digit at least) when trim is set. The digits are
// spread into the bytes of one word, the first digit lowest, by splitting
// each lane in two lanes of half the width: fours, then pairs, then ones.
// Each division by a constant is a multiplication and a shift that is
// exact for the lane's range (below 43699 for 100, 179 for 10).
func appendDigits8(dst []byte, x uint64, trim bool) []byte {
	v := x/1e4 | x%1e4<<32
	q := v * 5243 >> 19 & 0x0000007f0000007f
	v = q | (v-q*100)<<16
	q = v * 103 >> 10 & 0x000f000f000f000f
	v = q | (v-q*10)<<8
	skip := 0
	if trim {
		skip = min(bits.TrailingZeros64(v)/8, 7)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v+0x3030303030303030)
	return append(dst, b[skip:]...)
}

// mapEntries splits a header map as EncodeHeaders writes it into its count
// and its entries. An empty hb is an empty map.
func mapEntries(hb []byte) (n int, body []byte, ok bool) {
	if len(hb) == 0 {
		return 0, nil, true
	}
	r := mpread.New(hb, msgwire.ErrMalformedHeader)
	n, err := r.MapLen()
	return n, r.Rest(), err == nil
}

// arrival is when one batch of requests came in. Every request of a batch
// came from one socket read, so one reading of the clock serves them all;
// it is taken on first need, so a batch without deadlines reads no clock.
// (The clock is slow on some hosts: one reading per message was a
// twentieth of the reader's time.)
type arrival struct {
	t    time.Time
	us   int64         // t as Unix microseconds
	frac time.Duration // and the nanoseconds past them
	last lastDeadline  // what the batch's latest deadline came to
}

// lastDeadline remembers the latest deadline of a batch, so the next one
// can be had without the parts of the work that would come out the same.
// A batch is mostly requests from one caller under one context: they all
// carry the same absolute deadline (their wall part), and so the same
// distance from the arrival to it; and where that distance is what the
// handler gets (the clocks agree, the transit is short), the same
// handler deadline. Decoding the wall's sixteen digits and adding to a
// time.Time (its monotonic reading too) were most of the reader's cost
// of a deadline.
type lastDeadline struct {
	wall  [16]byte      // the wall part's digits, as the request carried them
	nwall uint8         // their count; 0: no wall remembered
	abs   time.Duration // that wall's distance from the arrival (untilMicro)
	absOK bool          // abs is exact; false: it is at least absBound
	d     time.Duration // the last budget handed out
	dl    time.Time     // and the deadline it gave; zero: none yet
	// The whole value that gave dl, as the request carried it. Requests
	// sent back to back carry the same one as often as not (the time left
	// moves by a microsecond every few of them), and the same value in
	// one batch comes to the same deadline: a byte comparison spares the
	// parse.
	val  [deadlineValueMax]byte
	nval uint8 // 0: none remembered
}

// deadlineValueMax is the longest deadline value a caller writes: two
// numbers of at most 15 and 16 digits and a space.
const deadlineValueMax = 15 + 1 + 16

// absBound is the bound the remembered distance is computed under: above
// every budget a request can carry, so that for any budget d the distance
// is under d exactly when untilMicro(wall, d) says so.
const absBound = maxBudget + time.Microsecond

// now is the batch's arrival time, read from the clock the first time.
func (a *arrival) now() time.Time {
	if a.t.IsZero() {
		a.t = time.Now()
		ns := a.t.UnixNano()
		a.us, a.frac = ns/1e3, time.Duration(ns%1e3)
	}
	return a.t
}

// untilMicro is how long after the arrival the Unix microsecond wall
// comes, if that is less than d (ok false otherwise). It is wall's time
// on the arrival's wall clock, as time.UnixMicro(wall).Sub(now) has it,
// in integers; d bounds it so that it cannot overflow.
func (a *arrival) untilMicro(wall int64, d time.Duration) (time.Duration, bool) {
	diff := wall - a.us
	if diff > int64(d/time.Microsecond)+1 {
		return 0, false // at least d
	}
	abs := time.Duration(diff)*time.Microsecond - a.frac
	return abs, abs < d
}

// headerDeadline is the handler's deadline for a request with headers hb
// that arrived now, or the zero time when the request carries none (or a
// malformed one: the handler then runs without a deadline, as it would
// for a caller that sent none). It allocates nothing unless the headers
// are malformed.
func headerDeadline(hb []byte) time.Time {
	var at arrival
	return headerDeadlineAt(hb, &at)
}

// headerDeadlineAt is headerDeadline for a request that arrived at at.
// What it works out is the same as for a request alone in its batch
// (TestBatchDeadlinesAreEachAlone): at.last only spares the steps whose
// inputs did not change.
func headerDeadlineAt(hb []byte, at *arrival) time.Time {
	v, ok := deadlineValue(hb)
	if !ok {
		return time.Time{}
	}
	last := &at.last
	if n := int(last.nval); n != 0 && len(v) == n && string(v) == string(last.val[:n]) {
		return last.dl
	}
	dl := deadlineOf(v, at)
	if !dl.IsZero() && len(v) <= len(last.val) {
		last.nval = uint8(copy(last.val[:], v))
	} else {
		last.nval = 0
	}
	return dl
}

// sameWall reports whether the wall digits w are those remembered in
// last (as many of them as w has). A wall in Unix microseconds has 16
// digits until the year 2286: two words, compared in line rather than
// with a call to memequal.
func sameWall(w []byte, last *[16]byte) bool {
	if len(w) == 16 {
		return binary.LittleEndian.Uint64(w) == binary.LittleEndian.Uint64(last[:]) &&
			binary.LittleEndian.Uint64(w[8:]) == binary.LittleEndian.Uint64(last[8:])
	}
	return string(w) == string(last[:len(w)])
}

// deadlineOf is the handler's deadline for the deadline value v, of a
// request that arrived at at.
func deadlineOf(v []byte, at *arrival) time.Time {
	a, rest := v, []byte(nil)
	if i := bytes.IndexByte(v, ' '); i >= 0 { // not bytes.Cut: its search for a one-byte separator costs more than the scan
		a, rest = v[:i], v[i+1:]
	}
	us, ok := parseDecimal(a, 15)
	if !ok {
		return time.Time{}
	}
	d := time.Duration(us) * time.Microsecond
	t := at.now()
	if rest != nil {
		last := &at.last
		if len(rest) == 0 || len(rest) != int(last.nwall) || !sameWall(rest, &last.wall) {
			w, ok := parseDecimal(rest, 16)
			if !ok {
				return time.Time{}
			}
			last.abs, last.absOK = at.untilMicro(int64(w), absBound)
			last.nwall = uint8(copy(last.wall[:], rest))
		}
		// The caller's own deadline, read on this host's clock: earlier
		// than arrival plus budget by the transit when the clocks agree.
		// It may cut the budget by maxSkewCut at most.
		if last.absOK && last.abs < d {
			d = max(last.abs, d-maxSkewCut)
		}
	}
	last := &at.last
	if last.dl.IsZero() || d != last.d {
		// One microsecond short: the wall clock that read the caller's
		// deadline and the monotonic clock that times the handler's
		// drift by nanoseconds, and the handler's deadline must never be
		// the later one.
		last.d, last.dl = d, t.Add(d-time.Microsecond)
	}
	return last.dl
}

// deadlineValue is lookupHeader(hb, DeadlineHeader), quicker for the
// header maps this package writes: appendRequestHeaderDeadline puts the
// deadline first, where a few byte comparisons find it.
func deadlineValue(hb []byte) ([]byte, bool) {
	var first []byte // the first key's bytes on, when the map has entries
	switch {
	case len(hb) > 0 && hb[0]&0xf0 == 0x80 && hb[0] != 0x80:
		first = hb[1:]
	case len(hb) > 3 && hb[0] == 0xde && hb[1]|hb[2] != 0:
		first = hb[3:]
	}
	if hasDeadlineKey(first) {
		val := first[len(deadlineKeyStr):]
		if len(val) >= 2 && val[0] == 0xd9 && int(val[1]) <= len(val)-2 {
			return val[2 : 2+int(val[1]) : 2+int(val[1])], true // a str8, as callers write it
		}
		r := mpread.New(val, msgwire.ErrMalformedHeader)
		v, err := r.Str()
		return v, err == nil
	}
	if !bytes.Contains(hb, deadlineKey) {
		return nil, false
	}
	return lookupHeader(hb, msgwire.DeadlineHeader)
}

// onlyDeadline reports whether the header map hb holds the deadline entry
// and nothing else, as a call with a deadline and no headers of its own
// sends it: such a request cannot be staged, which spares the search for
// the staging key.
func onlyDeadline(hb []byte) bool {
	if len(hb) < 1+len(deadlineKeyStr)+2 || hb[0] != 0x81 || !hasDeadlineKey(hb[1:]) {
		return false
	}
	val := hb[1+len(deadlineKeyStr):]
	return val[0] == 0xd9 && int(val[1]) == len(val)-2
}

// parseDecimal reads 1 to max (at most 19) decimal digits and nothing
// else, eight at a time where it can.
func parseDecimal(b []byte, max int) (uint64, bool) {
	if len(b) == 0 || len(b) > max {
		return 0, false
	}
	var v uint64
	for ; len(b) >= 8; b = b[8:] {
		d, ok := digits8(b)
		if !ok {
			return 0, false
		}
		v = v*1e8 + d
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// digits8 reads the eight decimal digits b starts with, in one word: the
// first is the least significant byte of a little-endian load.
func digits8(b []byte) (uint64, bool) {
	x := binary.LittleEndian.Uint64(b)
	// A digit's high nibble is 3, and stays 3 when 6 is added to it.
	const hi = 0xf0f0f0f0f0f0f0f0
	if x&hi|(x+0x0606060606060606)&hi>>4 != 0x3333333333333333 {
		return 0, false
	}
	x -= 0x3030303030303030
	x = (x*10 + x>>8) & 0x00ff00ff00ff00ff      // pairs of digits
	x = (x*100 + x>>16) & 0x0000ffff0000ffff    // fours
	return (x*10000 + x>>32) & 0xffffffff, true // eight
}

// lookupHeader finds key in an encoded header map without decoding the
// rest. The value aliases hb.
func lookupHeader(hb []byte, key string) ([]byte, bool) {
	if len(hb) == 0 {
		return nil, false
	}
	r := mpread.New(hb, msgwire.ErrMalformedHeader)
	n, err := r.MapLen()
	if err != nil {
		return nil, false
	}
	for range n {
		k, err := r.Str()
		if err != nil {
			return nil, false
		}
		v, err := r.Str()
		if err != nil {
			return nil, false
		}
		if string(k) == key {
			return v, true
		}
	}
	return nil, false
}
