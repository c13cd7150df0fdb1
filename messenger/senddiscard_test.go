package messenger_test

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// BenchmarkSendDiscarded is the messenger's own share of a fire-and-forget
// Send: the transport drops every request it is handed, so ns/op is the
// node's work from Node.Send to the transport's door, on one goroutine.
func BenchmarkSendDiscarded(b *testing.B) {
	tr, err := tcp.New()
	must(b, err)
	a := newNodeOn(b, &discardRequests{Transport: tr})
	server := newNode(b)
	must(b, a.RegisterPeer(server.PeerInfo()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	target := server.InstanceID()
	payload := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		// A system name: no handshake first, and nobody needs to answer.
		if err := a.Send(ctx, target, "_bench_sink", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// discardRequests admits every request and drops it; other frames pass.
type discardRequests struct{ ext.Transport }

func (d *discardRequests) Unwrap() ext.Transport { return d.Transport }
func (d *discardRequests) RetainsOwners() bool   { return true }

func (d *discardRequests) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	if f.Type == ext.Message {
		return ext.AdmittedOutcome, nil
	}
	return d.Transport.Send(target, f)
}

func (d *discardRequests) SendRef(target ext.InstanceID, f *ext.Frame) (ext.SendOutcome, error) {
	return ext.AdmittedOutcome, nil
}
