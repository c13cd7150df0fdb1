package streaming

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// The rules of ExpectOpener, with the messenger's loss report called
// directly (internal/robustness kills a real opener process): a waiting
// anchor ends with ErrOpenerLost; a flowing stream, a local producer and
// another instance's loss leave it alone.
func TestOpenerLostRules(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	opener := producer.msg.InstanceID()
	mk := func() *Anchor[[]byte] {
		t.Helper()
		a, err := CreateAnchor[[]byte](consumer.sm, ExpectOpener(opener))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	waiting, flowing, local := mk(), mk(), mk()
	s := attachMuxT[[]byte](t, producer, flowing.Handle())
	if err := s.Send(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, flowing, 5*time.Second); err != nil || string(v) != "x" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	ls, err := AttachAnchor[[]byte](context.Background(), consumer.sm, local.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()

	consumer.sm.openerLost(ext.NewInstanceID()) // someone else
	consumer.sm.openerLost(opener)
	if _, err := nextItemWithin(t, waiting, time.Second); !errors.Is(err, ErrOpenerLost) {
		t.Fatalf("waiting anchor: Next = %v, want ErrOpenerLost", err)
	}
	if _, err := AttachAnchor[[]byte](context.Background(), consumer.sm, waiting.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after ErrOpenerLost = %v, want ErrAnchorNotFound", err)
	}
	for name, pair := range map[string]struct {
		a *Anchor[[]byte]
		s interface {
			Send(context.Context, []byte) error
		}
	}{"flowing": {flowing, s}, "local": {local, ls}} {
		if err := pair.s.Send(context.Background(), []byte("y")); err != nil {
			t.Fatalf("%s: Send after the opener's loss: %v", name, err)
		}
		if v, err := nextItemWithin(t, pair.a, 5*time.Second); err != nil || string(v) != "y" {
			t.Fatalf("%s: Next = %q, %v; the opener's loss must not end it", name, v, err)
		}
	}
	if n := len(consumer.sm.openers.take(opener)); n != 0 {
		t.Fatalf("%d anchors still indexed for the lost opener", n)
	}
}
