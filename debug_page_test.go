package velo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
)

// chromium finds Debian's chromium. Locally a missing one skips the page
// test; in CI (VELO_CI set, as .ci/run does, which installs the package)
// it fails, so that a broken install cannot pass as a skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("VELO_CI") != "" {
		t.Fatal("chromium is not installed: the page test needs Debian's chromium package (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); set VELO_CI to make this a failure")
	return ""
}

func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// peerCell is a JavaScript predicate: the peer row of instance has text
// in its column col (1-based).
func peerCell(instance string, col int, text string) string {
	return fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-instance="%s"]'); return !!r && r.children[%d].textContent === %q; })()`,
		instance, col-1, text)
}

// laneCell is a script that is true once the lanes row named by lane
// (instance/transport/index) has text in its col-th cell (from 1).
func laneCell(lane string, col int, text string) string {
	return fmt.Sprintf(`(() => { const r = document.querySelector('tr[data-lane="%s"]'); return !!r && r.children[%d].textContent === %q; })()`,
		lane, col-1, text)
}

// TestDebugPageFollowsTheNode opens a node's page in headless chromium:
// the registered peer's row is there; a second peer that joins appears
// without a reload, and so do a call in flight to it (held by its
// handler), a stream over the mux, its lane 0 connected in the lanes
// table and an anchor waiting for its producer.
// With VELO_PAGE_SCREENSHOT set to a file name, the page is saved there
// (docs/img/debug-velo.png comes from this).
func TestDebugPageFollowsTheNode(t *testing.T) {
	ctx := browser(t)
	n, first := node(t), node(t)
	if err := n.RegisterPeer(first.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/velo", velo.DebugHandler(n))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/debug/velo")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#status.ok`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	row := `tr[data-instance="` + first.InstanceID().String() + `"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row))); err != nil {
		t.Fatalf("the peer's row: %v", err)
	}
	worker, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+` td:nth-child(2)`)))
	if err != nil || worker != first.WorkerID().String() {
		t.Fatalf("the row's worker %q (%v), want %s", worker, err, first.WorkerID())
	}

	// A second peer joins, with a handler that holds its call.
	second := node(t)
	entered, gate := make(chan struct{}), make(chan struct{})
	defer close(gate)
	if err := second.Register(velo.UnaryHandler("held", func(*velo.Context) ([]byte, error) {
		close(entered)
		<-gate
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := n.RegisterPeer(second.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := second.RegisterPeer(n.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-instance="`+second.InstanceID().String()+`"]`))); err != nil {
		t.Fatalf("the second peer did not appear without a reload: %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go n.Unary(cctx, second.InstanceID(), "held", nil)
	<-entered
	anchor, err := streaming.CreateAnchor[string](second.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	sender, err := streaming.AttachAnchor[string](cctx, n.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Finalize()
	if err := sender.Send(cctx, "token"); err != nil {
		t.Fatal(err)
	}
	waiting, err := streaming.CreateAnchor[string](n.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()

	err = chromedp.Do(ctx,
		chromedp.Poll[chromedp.Void](peerCell(second.InstanceID().String(), 6, "done")), // handshake
		chromedp.Poll[chromedp.Void](peerCell(second.InstanceID().String(), 11, "1")),   // in flight
		chromedp.WaitVisible(chromedp.CSS(`tr[data-mux="`+second.WorkerID().String()+`/egress/0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-phase="unattached"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-event="greeted"]`)),
		chromedp.Poll[chromedp.Void](laneCell(second.InstanceID().String()+"/tcp/0", 4, "yes")), // connected
	)
	if err != nil {
		t.Fatalf("the page did not follow the node: %v", err)
	}
	if shot := os.Getenv("VELO_PAGE_SCREENSHOT"); shot != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
