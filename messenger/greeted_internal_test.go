package messenger

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// TestBatchGreetedLookup: a read looks a sender up in the greeted set
// until it finds it there, then takes it as greeted for the rest of the
// read; another sender of the same read is looked up on its own, and the
// next read looks again.
func TestBatchGreetedLookup(t *testing.T) {
	m := new(Messenger)
	a, b := ext.WorkerID(7), ext.WorkerID(8)
	var read spawnBatch
	if read.greetedBy(m, a) {
		t.Fatal("a sender that never greeted was taken as greeted")
	}
	m.greet(a)
	if !read.greetedBy(m, a) {
		t.Fatal("a sender that greeted was refused")
	}
	if read.greetedBy(m, b) {
		t.Fatal("another sender of the same read was taken as greeted")
	}
	m.greeted.Delete(a) // the peer table evicted it within the read
	if !read.greetedBy(m, a) {
		t.Fatal("the read forgot the sender it found greeted")
	}
	var next spawnBatch
	if next.greetedBy(m, a) {
		t.Fatal("the next read kept a sender the set forgot")
	}
}
