package msgpeers

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeWriter records what its lane hands it; hold, when set, keeps the
// first WriteAll waiting until it is closed.
type fakeWriter struct {
	c       *Core
	l       *Lane
	hold    chan struct{}
	held    chan struct{} // closed once the first WriteAll waits on hold
	once    sync.Once
	mu      sync.Mutex
	sent    []byte
	aborted atomic.Int32
}

func (w *fakeWriter) WriteAll(batch []ext.Frame) {
	if w.hold != nil {
		w.once.Do(func() { close(w.held); <-w.hold })
	}
	for i, f := range batch {
		select {
		case <-w.l.Gone():
			w.l.Failed(f, ext.ErrConnectionClosed)
		default:
			if f.Payload[0] == failMe {
				w.l.Failed(f, errTestWrite)
				break
			}
			w.mu.Lock()
			w.sent = append(w.sent, f.Payload[0])
			w.mu.Unlock()
			f.Release()
		}
		batch[i] = ext.Frame{}
	}
}

func (w *fakeWriter) Abort() { w.aborted.Add(1) }

// failMe marks a frame the fakeWriter fails with errTestWrite.
const failMe = 0xff

var errTestWrite = errors.New("test writer: refused")

// newCore is a started Core whose send errors go to failed.
func newCore(t *testing.T, failed func(error)) *Core {
	t.Helper()
	c := &Core{}
	c.Init(1 << 20)
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{})
	a.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) { failed(err) })
	c.SetAdapter(a)
	c.MarkStarted()
	return c
}

func shutdown(c *Core) {
	c.BeginShutdown(time.Second)
	c.StopWriters()
	c.WaitWriters()
}

func frame(b byte) ext.Frame { return ext.Frame{Type: ext.Message, Payload: []byte{b}} }

// Frames on one lane reach its Writer in the order sent, and a shutdown
// within the grace sends what was queued before the writers end.
func TestLaneKeepsOrderAndFinishes(t *testing.T) {
	c := newCore(t, func(err error) { t.Errorf("send failed: %v", err) })
	id := ext.NewInstanceID()
	var writers []*fakeWriter
	err := c.Register(id, "a", 2, func(l *Lane) Writer {
		w := &fakeWriter{c: c, l: l}
		writers = append(writers, w)
		return w
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Lanes(id) != 2 || writers[1].l.Index() != 1 {
		t.Fatalf("lanes %d, second lane index %d", c.Lanes(id), writers[1].l.Index())
	}
	for i := range 200 {
		if _, err := c.SendOnLane(id, 1, frame(byte(i)), 16); err != nil {
			t.Fatal(err)
		}
	}
	shutdown(c)
	w := writers[1]
	if len(w.sent) != 200 {
		t.Fatalf("sent %d frames, want 200", len(w.sent))
	}
	for i, b := range w.sent {
		if b != byte(i) {
			t.Fatalf("frame %d carried %d: out of order", i, b)
		}
	}
	if _, err := c.SendOnLane(id, 0, frame(0), 16); !errors.Is(err, ext.ErrTransportClosed) {
		t.Fatalf("send after shutdown: %v, want ErrTransportClosed", err)
	}
	if w.aborted.Load() == 0 {
		t.Fatal("the writer's Abort was not called when its goroutine ended")
	}
}

// Unregister fails what is still queued with ErrConnectionClosed and
// aborts the writer: nothing is sent behind it.
func TestUnregisterFailsQueued(t *testing.T) {
	var failed atomic.Int32
	c := newCore(t, func(err error) {
		if !errors.Is(err, ext.ErrConnectionClosed) {
			t.Errorf("failed with %v, want ErrConnectionClosed", err)
		}
		failed.Add(1)
	})
	id := ext.NewInstanceID()
	w := &fakeWriter{c: c, hold: make(chan struct{}), held: make(chan struct{})}
	c.Register(id, "a", 1, func(l *Lane) Writer { w.l = l; return w })
	c.SendOnLane(id, 0, frame(0), 16)
	<-w.held // the writer took frame 0 and waits
	for i := 1; i < 10; i++ {
		c.SendOnLane(id, 0, frame(byte(i)), 16)
	}
	c.Unregister(id)
	if w.aborted.Load() == 0 {
		t.Fatal("Unregister did not abort the writer")
	}
	close(w.hold)
	shutdown(c)
	// Frame 0 was taken before the unregister and is failed by the Gone
	// check too; the nine behind it never reach the wire.
	if len(w.sent) != 0 || failed.Load() != 10 {
		t.Fatalf("sent %d, failed %d; want 0 and 10", len(w.sent), failed.Load())
	}
	if c.SendFailed() != 10 || c.Lanes(id) != 0 {
		t.Fatalf("SendFailed %d, lanes %d", c.SendFailed(), c.Lanes(id))
	}
}

// What SendOnLane and Register refuse, and a registration at the same
// address that keeps its lanes.
func TestRefusals(t *testing.T) {
	c := &Core{}
	c.Init(1 << 20)
	id := ext.NewInstanceID()
	made := 0
	newW := func(l *Lane) Writer { made++; return &fakeWriter{c: c, l: l} }
	if err := c.Register(id, "a", 1, newW); !errors.Is(err, ext.ErrTransportClosed) {
		t.Fatalf("register before start: %v", err)
	}
	c.MarkStarted()
	if _, err := c.SendOnLane(id, 0, frame(0), 16); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("unknown peer: %v", err)
	}
	c.Register(id, "a", 1, newW)
	c.Register(id, "a", 1, newW)
	if made != 1 {
		t.Fatalf("%d writers made for one address, want 1", made)
	}
	if addr, err := c.HealthAddr(id); addr != "a" || err != nil {
		t.Fatalf("HealthAddr = %q, %v", addr, err)
	}
	if _, err := c.SendOnLane(id, 1, frame(0), 16); !errors.Is(err, ext.ErrLaneOutOfRange) {
		t.Fatalf("lane 1 of 1: %v", err)
	}
	var tooLarge *ext.FrameTooLargeError
	if _, err := c.SendOnLane(id, 0, ext.Frame{Payload: make([]byte, 17)}, 16); !errors.As(err, &tooLarge) || tooLarge.Max != 16 {
		t.Fatalf("17 bytes over 16: %v", err)
	}
	shutdown(c)
}
