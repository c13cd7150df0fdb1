package client_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
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

// TestPageFollowsInstances opens the hub's page in headless chromium,
// registers a node (with a service) and waits for its row and its
// service to appear without a reload; then unregisters it and waits for
// both to go.
func TestPageFollowsInstances(t *testing.T) {
	exe := chromium(t)
	h := startHub(t, hubConfig())
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(pubURL(h)+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#status.live`))); err != nil {
		t.Fatalf("open the page: %v", err)
	}

	hc, err := client.New(client.Config{URL: ctlURL(h), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	node, err := velo.New(context.Background(), append(hc.NodeOptions(), tcpOpt(t), velo.WithLogger(quiet))...)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown(context.Background())
	if _, err := hc.RegisterService(context.Background(), "page-svc"); err != nil {
		t.Fatal(err)
	}
	if err := hc.Register(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	row := `tr[data-instance="` + node.InstanceID().String() + `"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row)), chromedp.WaitVisible(chromedp.CSS(`tr[data-service="page-svc"]`))); err != nil {
		t.Fatalf("the registered instance did not appear: %v", err)
	}
	epoch, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+` td:nth-child(4)`)))
	if err != nil || epoch != strconv.FormatUint(uint64(hc.Epoch()), 10) {
		t.Fatalf("the row's epoch %q (%v), want %d", epoch, err, hc.Epoch())
	}
	addr, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row+` td:nth-child(3)`)))
	if err != nil || !strings.Contains(addr, "tcp=127.0.0.1:") {
		t.Fatalf("the row's address %q (%v)", addr, err)
	}
	if shot := os.Getenv("VELO_PAGE_SCREENSHOT"); shot != "" {
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(shot, png, 0o644)
		}
	}

	if err := hc.Unregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.WaitNotPresent(chromedp.CSS(row)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-service="page-svc"]`)),
	)
	if err != nil {
		t.Fatalf("the removed instance did not disappear: %v", err)
	}
}
