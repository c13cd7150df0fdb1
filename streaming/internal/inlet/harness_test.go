package inlet

import (
	"context"
	"errors"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// The inlet's own tests drive a State as the streaming package does, with
// no Manager: testOwner stands in for the registry, and testAnchor and
// testSender are the Anchor[[]byte] and Sender[[]byte] of one stream, cut
// down to what the tests call.

type testOwner struct{}

func (testOwner) Remove(*State) {}
func (testOwner) CountExpired() {}

// newTestHome is the Home of anchors that wait Forever for a producer, so
// that no deadline queue is needed.
func newTestHome() *Home { return &Home{Owner: testOwner{}, Lifetime: Forever, Base: time.Now()} }

type testAnchor struct{ st State }

type testSender struct{ Sender }

// newPair makes an anchor of home with the default capacity and a
// producer attached to it on the same worker.
func newPair(t *testing.T, home *Home) (*testAnchor, *testSender) {
	t.Helper()
	a := new(testAnchor)
	a.st.Init(home, 256, 0, [16]byte{})
	if why := a.st.ClaimLocal(); why != Claimed {
		t.Fatalf("ClaimLocal = %v", why)
	}
	s := new(testSender)
	s.Init(&a.st, false)
	return a, s
}

// Next is Anchor.Next for a byte item: its payload.
func (a *testAnchor) Next(ctx context.Context) ([]byte, error) {
	f, err := a.st.Pop(ctx)
	if err != nil {
		return nil, err
	}
	p, ok := f.ItemBytes()
	if !ok {
		return nil, errors.New("not a byte item")
	}
	return p, nil
}

func (s *testSender) Send(ctx context.Context, v []byte) error {
	return s.st.Push(ctx, &s.Sender, wire.AppendBytesItem(nil, v))
}

func (s *testSender) Finalize() error {
	_, err := s.st.Terminate(&s.Sender, FinalizedFrame, false)
	return err
}
