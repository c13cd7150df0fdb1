package fs_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/discovery/discoverytest"
	"github.com/velo-go/velo/discovery/fs"
	"github.com/velo-go/velo/ext"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	discoverytest.ServeWorkerIfChild(backends)
	if os.Getenv("VELO_FS_CHILD") != "" {
		childRegister()
		return
	}
	goleak.VerifyTestMain(m)
}

func TestPeerConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	discoverytest.RunPeer(t, func(*testing.T) ext.PeerDiscovery {
		p := fs.NewPeers(path)
		p.PollInterval = 10 * time.Millisecond
		return p
	})
}

func TestThreeNodesFindEachOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	discoverytest.RunNodes(t, func(*testing.T) ext.PeerDiscovery {
		p := fs.NewPeers(path)
		p.PollInterval = 10 * time.Millisecond
		return p
	})
}

func TestServiceConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.json")
	discoverytest.RunService(t, func(*testing.T) ext.ServiceDiscovery {
		s := fs.NewServices(path)
		s.PollInterval = 10 * time.Millisecond
		return s
	})
}

// TestPeerFileGolden pins the file body to the reference's shape: field
// names, the address as an array of numbers, and the xxh3_64 checksum.
func TestPeerFileGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	id, _ := ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")
	info := ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("h:1")}}
	if err := fs.NewPeers(path).Register(context.Background(), info); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var got map[string][]map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	e := got["peers"][0]
	// 81 a3 "tcp" 93 'h' ':' '1': a map of one key to an array of 3 numbers.
	wantAddr := []any{129.0, 163.0, 116.0, 99.0, 112.0, 147.0, 104.0, 58.0, 49.0}
	if e["instance_id"] != id.String() || strconv.FormatFloat(e["worker_id"].(float64), 'f', 0, 64) == "" {
		t.Fatalf("entry %v", e)
	}
	if len(e) != 4 || !sameAny(e["worker_address"].([]any), wantAddr) {
		t.Fatalf("entry %v, want address %v", e, wantAddr)
	}
	if _, ok := e["address_checksum"].(float64); !ok {
		t.Fatalf("no address_checksum in %v", e)
	}
}

func sameAny(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadsRustFile reads a peers file as the reference writes it.
func TestReadsRustFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	body := `{
  "peers": [
    {
      "instance_id": "6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8",
      "worker_id": 1,
      "worker_address": [129, 163, 116, 99, 112, 147, 104, 58, 49],
      "address_checksum": 2
    }
  ]
}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	id, _ := ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")
	got, err := fs.NewPeers(path).DiscoverInstance(context.Background(), id)
	if err != nil || string(got.Address["tcp"]) != "h:1" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// TestConcurrentWritersInOneProcess: many handles on one file register at
// once; the lock and the rename keep every entry.
func TestConcurrentWritersInOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	const n = 20
	infos := make([]ext.PeerInfo, n)
	var wg sync.WaitGroup
	for i := range infos {
		infos[i] = discoverytest.NewPeer()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fs.NewPeers(path).Register(context.Background(), infos[i]); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, info := range infos {
		discoverytest.MustFind(t, fs.NewPeers(path), info)
	}
}

// TestConcurrentWriterProcesses: several processes register into one file
// at once. Without the flock, read-modify-write cycles overlap and lose
// entries.
func TestConcurrentWriterProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	const procs, each = 4, 10
	var wg sync.WaitGroup
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "VELO_FS_CHILD="+path, "VELO_FS_EACH="+strconv.Itoa(each))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("child: %v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(path)
	var pf struct{ Peers []json.RawMessage }
	if err := json.Unmarshal(b, &pf); err != nil {
		t.Fatal(err)
	}
	if len(pf.Peers) != procs*each {
		t.Fatalf("%d entries, want %d", len(pf.Peers), procs*each)
	}
}

func childRegister() {
	each, _ := strconv.Atoi(os.Getenv("VELO_FS_EACH"))
	d := fs.NewPeers(os.Getenv("VELO_FS_CHILD"))
	for range each {
		if err := d.Register(context.Background(), discoverytest.NewPeer()); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
	}
}

// backends are the two files of a discovery folder, for a worker process
// or a caller.
func backends(dir string) (ext.PeerDiscovery, ext.ServiceDiscovery, error) {
	p := fs.NewPeers(filepath.Join(dir, "peers.json"))
	s := fs.NewServices(filepath.Join(dir, "services.json"))
	s.PollInterval = 50 * time.Millisecond
	return p, s, nil
}

// TestServiceKill: three worker processes serve one service, one is
// SIGKILLed under load; calls by service name go on on the two left.
func TestServiceKill(t *testing.T) {
	discoverytest.RunServiceKill(t, t.TempDir(), backends)
}

// TestKilledServiceEntryIsSkipped: a worker process registered in a
// service and SIGKILLed leaves its entry in the file, but its liveness
// lock went with it: the next listing skips the entry and prunes it.
func TestKilledServiceEntryIsSkipped(t *testing.T) {
	dir := t.TempDir()
	live, _ := discoverytest.StartWorker(t, dir, "w")
	dead, kill := discoverytest.StartWorker(t, dir, "w")
	_, svcs, _ := backends(dir)
	discoverytest.MustList(t, svcs, "w", live, dead)
	kill()
	discoverytest.MustList(t, svcs, "w", live)
	b, err := os.ReadFile(filepath.Join(dir, "services.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sf struct{ Services map[string][]string }
	if err := json.Unmarshal(b, &sf); err != nil {
		t.Fatal(err)
	}
	if got := sf.Services["w"]; len(got) != 1 || got[0] != live.String() {
		t.Fatalf("file after the listing: %v, want only %s", got, live)
	}
}

// TestEntryWithoutLockIsLive: an entry with no lock file (written by the
// reference, or by an older version of this package) is listed as before.
func TestEntryWithoutLockIsLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.json")
	id := ext.NewInstanceID()
	body := `{"services":{"llm":["` + id.String() + `"]}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	discoverytest.MustList(t, fs.NewServices(path), "llm", id)
}

// TestWatchSeesRegistrationBeforeFullRead: a watch whose full reads are
// an hour apart still reports a registration, because it stats the file
// between full reads and reads it at once when it changed.
func TestWatchSeesRegistrationBeforeFullRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.json")
	watcher := fs.NewServices(path)
	watcher.PollInterval = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := watcher.WatchService(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	if first := <-ch; first.Kind != ext.ServiceInitial || len(first.IDs) != 0 {
		t.Fatalf("first event %+v, want an empty initial listing", first)
	}
	id := ext.NewInstanceID()
	registrant := fs.NewServices(path)
	if err := registrant.RegisterService(ctx, "llm", id); err != nil {
		t.Fatal(err)
	}
	defer registrant.UnregisterService(context.Background(), "llm", id)
	select {
	case ev := <-ch:
		if ev.Kind != ext.ServiceAdded || len(ev.IDs) != 1 || ev.IDs[0] != id {
			t.Fatalf("event %+v, want %s added", ev, id)
		}
	case <-ctx.Done():
		t.Fatal("the watch did not report the registration before its next full read")
	}
	cancel()
	for range ch { // the watch's goroutine ends with ctx
	}
}
