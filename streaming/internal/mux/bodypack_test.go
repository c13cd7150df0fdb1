package mux

import (
	"bytes"
	"testing"

	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// TestBodyPackCopies: every copy is the body's bytes at cap == len (an
// empty body, a single byte, one that fills a block's rest exactly, the
// largest packed one and the smallest left alone, one larger than a
// block), no two copies share a byte, no copy aliases its source, and no
// later copy writes over an earlier one (a block is never reused). The
// blocks and lone copies together come to at most 4/3 of the bodies'
// bytes and one block: a block is given up only when at least 12 KiB of
// it is filled.
func TestBodyPackCopies(t *testing.T) {
	var sizes []int
	sizes = append(sizes, 0, 1, bodyBlock-1-100, 100, 0, 1) // 1 + (block-101) + 100 fills it exactly
	sizes = append(sizes, bodyAlone, bodyAlone+1, bodyBlock, bodyBlock+1, 0)
	sizes = append(sizes, 1, bodyAlone, bodyAlone, bodyAlone, bodyAlone) // 12,289 used, 4,095 left: the worst waste
	for i := range 3000 {
		sizes = append(sizes, 1+i*7%bodyAlone)
	}
	var p bodyPack
	var srcs, outs [][]byte
	var bodyBytes, held int
	for i, n := range sizes {
		src := bytes.Repeat([]byte{byte(i)}, n)
		before := cap(p.block) - len(p.block)
		out := p.copyLocked(src)
		if len(out) != n || cap(out) != n || !bytes.Equal(out, src) {
			t.Fatalf("body %d of %d bytes: copy of %d bytes, cap %d, equal %v", i, n, len(out), cap(out), bytes.Equal(out, src))
		}
		switch {
		case n > bodyAlone:
			held += n
		case cap(p.block)-len(p.block) > before:
			held += bodyBlock // a new block
		}
		bodyBytes += n
		if n > 0 {
			src[0]++ // the copy is not the source
			if out[0] == src[0] {
				t.Fatalf("body %d: the copy aliases its source", i)
			}
		}
		srcs, outs = append(srcs, src), append(outs, out)
	}
	for i, out := range outs {
		if len(out) > 0 {
			srcs[i][0]--
			out[0] ^= 0xff // a write to one copy shows in no other
		}
	}
	for i, out := range outs {
		if len(out) > 0 {
			out[0] ^= 0xff
		}
		if !bytes.Equal(out, srcs[i]) {
			t.Fatalf("body %d changed after later copies, or shares bytes with another", i)
		}
	}
	t.Logf("%d bodies, %d bytes: %d bytes of blocks and lone copies", len(sizes), bodyBytes, held)
	if limit := bodyBytes*4/3 + bodyBlock; held > limit {
		t.Errorf("%d bytes held for %d bytes of bodies, want at most %d", held, bodyBytes, limit)
	}
}

// TestBodyPackLetsIdleBlockGo: a table that received no body for a whole
// watchdog window holds no block (it kept one for as long as its peer
// stayed connected), one still receiving keeps filling its block, and a
// body handed out before the block went is untouched by what comes after.
func TestBodyPackLetsIdleBlockGo(t *testing.T) {
	var p bodyPack
	first := p.copyLocked([]byte("first"))
	p.idleLocked() // a body came in this window
	if p.block == nil {
		t.Fatal("a block that was written to in the window was let go")
	}
	second := p.copyLocked([]byte("second"))
	if &second[0] != &p.block[len("first")] {
		t.Fatal("a busy table did not keep filling its block")
	}
	p.idleLocked()
	p.idleLocked() // a window with no body
	if p.block != nil {
		t.Fatal("an idle table still holds its block")
	}
	third := p.copyLocked([]byte("third"))
	if string(first) != "first" || string(second) != "second" || string(third) != "third" {
		t.Fatalf("bodies %q %q %q", first, second, third)
	}
}

// TestWatchdogLetsIdleBlockGo: the watchdog's window is what lets an idle
// table's block go (idleLocked); the stream's item is still whole.
func TestWatchdogLetsIdleBlockGo(t *testing.T) {
	fi := newFuzzIngress(t)
	fi.handle(t, fi.batch(t, 1, 2, func(e *muxwire.Encoder) { e.Data(fuzzSlot, 1, wire.BytesItem([]byte("kept"))) }))
	ip, _ := fi.mx.IngressFor(fuzzPeer, fi.lane)
	ip.watch()
	ip.watch()
	ip.Mu.Lock()
	block := ip.bodies.block
	ip.Mu.Unlock()
	if block != nil {
		t.Fatalf("a table idle for a watchdog window holds a block of %d bytes", cap(block))
	}
	if fr, err := fi.st.Pop(simDone); err != nil || string(fr.Item) != "\xc4\x04kept" {
		t.Fatalf("the item: %v %q", err, fr.Item)
	}
}
