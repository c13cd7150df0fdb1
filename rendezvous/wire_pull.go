package rendezvous

import "strconv"

// A pull request goes out once per chunk, 2048 times per GiB, and
// encoding/json's reflection on both ends was about 2% of a Get's CPU.
// These two write and read its one usual shape by hand; the bytes on the
// wire do not change.

// appendPullRequest appends the body of _rv_pull exactly as
// json.Marshal(pullRequest{...}) writes it (serde's form too).
func appendPullRequest(b []byte, transfer uint64, chunk uint32) []byte {
	b = append(b, `{"transfer_id":`...)
	b = strconv.AppendUint(b, transfer, 10)
	b = append(b, `,"chunk_index":`...)
	b = strconv.AppendUint(b, uint64(chunk), 10)
	return append(b, '}')
}

// parsePullRequest reads a body of exactly the shape appendPullRequest
// writes. ok is false for anything else (spacing, another field order,
// leading zeros, overflow, trailing bytes), which decode then reads as
// before: it only takes bodies that encoding/json reads to the same
// numbers, so no body is read differently than it was.
func parsePullRequest(b []byte) (req pullRequest, ok bool) {
	const head, mid = `{"transfer_id":`, `,"chunk_index":`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return req, false
	}
	t, b, ok := leadingUint(b[len(head):], 20)
	if !ok || len(b) < len(mid) || string(b[:len(mid)]) != mid {
		return req, false
	}
	c, b, ok := leadingUint(b[len(mid):], 10)
	if !ok || len(b) != 1 || b[0] != '}' || c > 1<<32-1 {
		return req, false
	}
	return pullRequest{TransferID: t, ChunkIndex: uint32(c)}, true
}

// leadingUint reads the decimal digits at the start of b, at most max of
// them, as JSON writes an unsigned integer (no sign, no leading zero),
// and returns the rest of b. ok is false when there are none, too many,
// a leading zero or the value overflows a uint64.
func leadingUint(b []byte, max int) (v uint64, rest []byte, ok bool) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > max || (n > 1 && b[0] == '0') {
		return 0, b, false
	}
	for _, d := range b[:n] {
		if v > (1<<64-1-uint64(d-'0'))/10 {
			return 0, b, false // past a uint64
		}
		v = v*10 + uint64(d-'0')
	}
	return v, b[n:], true
}
