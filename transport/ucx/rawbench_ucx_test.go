//go:build ucx

package ucx

import (
	"testing"

	"github.com/velo-go/velo/internal/ucx"
)

// BenchmarkRawAMPingPong is a 64-byte AM round trip between two
// internal/ucx workers of this process, with no transport above them: the
// floor under BenchmarkUnaryRTT/ucx.
func BenchmarkRawAMPingPong(b *testing.B) {
	mk := func() *ucx.Worker {
		w, err := ucx.NewWorker(ucx.Config{TLS: "tcp"})
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	wa, wb := mk(), mk()
	defer wa.Close()
	defer wb.Close()
	epAB, err := wa.Connect(wb.Address())
	if err != nil {
		b.Fatal(err)
	}
	epBA, err := wb.Connect(wa.Address())
	if err != nil {
		b.Fatal(err)
	}
	pong := make(chan struct{}, 1)
	payload := make([]byte, 64)
	wb.SetAMHandler(1, func(h, d []byte) { wb.SendAM(epBA, 2, nil, payload, nil) })
	wa.SetAMHandler(2, func(h, d []byte) { pong <- struct{}{} })
	ping := func() {
		if err := wa.SendAM(epAB, 1, nil, payload, nil); err != nil {
			b.Fatal(err)
		}
		<-pong
	}
	ping()
	b.ResetTimer()
	for range b.N {
		ping()
	}
}
