package ucx

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// MaxRkeyLen bounds a packed remote key, at pack time and before unpack.
// Keys packed by UCX 1.13 for host memory are 10 to 40 bytes; InfiniBand
// adds a few bytes per memory domain.
const MaxRkeyLen = 1024

// memTypeLast is UCS_MEMORY_TYPE_LAST of UCX 1.13 (host, CUDA, CUDA
// managed, ROCm, ROCm managed). UCX indexes tables by a key's memory type,
// so a larger one must not reach it. cgo.go checks it against the header at compile time.
const memTypeLast = 5

// checkRkey checks the framing of a key packed by ucp_rkey_pack:
//
//	md_map    u64 little-endian, a bit per remote memory domain
//	mem_type  u8
//	per set bit of md_map, lowest first:
//	          u8 size, then size bytes of that domain's key
//	optional trailer (memory on a known system device):
//	          u8 sys_dev, then 3-byte distance entries
//
// It proves only that UCX's parse stays inside the bytes and sees a memory
// type it knows: a well-framed key for memory that is gone still passes.
func checkRkey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("%w: empty", ErrBadRkey)
	case len(key) > MaxRkeyLen:
		return fmt.Errorf("%w: %d bytes, over %d", ErrBadRkey, len(key), MaxRkeyLen)
	case len(key) < 9:
		return fmt.Errorf("%w: %d bytes, shorter than its header", ErrBadRkey, len(key))
	}
	mdMap := binary.LittleEndian.Uint64(key)
	if mdMap == 0 {
		return fmt.Errorf("%w: names no memory domain", ErrBadRkey)
	}
	if key[8] >= memTypeLast {
		return fmt.Errorf("%w: memory type %d unknown", ErrBadRkey, key[8])
	}
	p := 9
	for range bits.OnesCount64(mdMap) {
		if p >= len(key) {
			return fmt.Errorf("%w: truncated in its domain keys", ErrBadRkey)
		}
		p += 1 + int(key[p])
		if p > len(key) {
			return fmt.Errorf("%w: a domain key runs past the end", ErrBadRkey)
		}
	}
	if rest := len(key) - p; rest > 0 && (rest-1)%3 != 0 {
		return fmt.Errorf("%w: %d trailing bytes are no device trailer", ErrBadRkey, rest)
	}
	return nil
}
