package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var etcdPrefixes atomic.Int64

// etcdStore opens an EtcdStore on the shared embedded etcd; the prefix
// names one hub deployment.
func etcdStore(t *testing.T, prefix string) *etcdstore.Store {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint(t)}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := etcdstore.WaitForPrefix(ctx, cli, prefix); err != nil {
		t.Fatal(err)
	}
	st, err := etcdstore.New(ctx, cli, etcdstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newPrefix() string { return fmt.Sprintf("/velo-hub/client-test-%d", etcdPrefixes.Add(1)) }

// TestRestartRecoversOnEtcd: a hub on etcd stops and another starts on
// the same prefix and addresses. The new hub's heartbeat carries its new
// id; the client notices (Recovered), registers again presenting its
// credential, and holds a registration of the new hub with a later
// epoch; its services come back with it, and the node's calls go on.
func TestRestartRecoversOnEtcd(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix()
	h1 := startHubOn(t, hubConfig(), etcdStore(t, prefix))
	node, hc := join(t, h1)
	if _, err := hc.RegisterService(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	epoch1 := hc.Epoch()
	cfg := hubConfig()
	cfg.PublicAddr, cfg.ControlAddr = h1.PublicAddr().String(), h1.ControlAddr().String()
	stopHub(t, h1)

	h2 := startHubOn(t, cfg, etcdStore(t, prefix))
	if h2.ID() == h1.ID() {
		t.Fatal("the restarted hub kept its id")
	}
	eventually(t, "the client to recover on the new hub", func() bool {
		return hc.IsRegistered() && hc.HubID() == h2.ID()
	})
	if !hc.Recovered() || hc.Epoch() <= epoch1 {
		t.Fatalf("after the restart: recovered %v, epoch %d (was %d)", hc.Recovered(), hc.Epoch(), epoch1)
	}
	e, ok := h2.Store().LookupInstance(node.InstanceID())
	if !ok || e.Epoch != hc.Epoch() {
		t.Fatalf("the new hub's entry: %v %+v", ok, e)
	}
	if got := hubNames(t, h2, hc, node.InstanceID()); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("services after recovery: %v", got)
	}
	// The new hub's probes are answered: the entry stays.
	if pr := probe(t, h2, node); !pr.OK {
		t.Fatalf("probe after recovery: %s", pr.Error)
	}
}

func startHubOn(t *testing.T, cfg hub.Config, st *etcdstore.Store) *hub.Hub {
	t.Helper()
	h := startHub(t, cfg, hub.WithStore(st))
	return h
}

// nodeProc is one node process of the must-show.
type nodeProc struct {
	name  string
	id    ext.InstanceID
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startNodeProc(t *testing.T, h *hub.Hub, name string) *nodeProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeProcessEnv+"=1", "VELO_HUB_URL="+ctlURL(h), "VELO_NODE_NAME="+name)
	cmd.Stderr = os.Stderr
	p := &nodeProc{name: name, cmd: cmd, lines: make(chan string, 16)}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line := p.next(t)
	id, err := ext.ParseInstanceID(strings.TrimPrefix(line, "ready "))
	if err != nil {
		t.Fatalf("node %s: %q", name, line)
	}
	p.id = id
	return p
}

func (p *nodeProc) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("node %s ended", p.name)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("node %s said nothing", p.name)
	}
	return ""
}

// TestThreeProcessesOnEtcd is the hub's must-show: a hub on embedded
// etcd and three nodes in their own processes register, find each other
// and call by service name; one is killed with SIGKILL, and the hub's
// probes remove it (with heartbeat_max_failures 2, that is two probe
// intervals after the kill plus the time the probes take), which the
// instance watch (what the page follows) shows.
func TestThreeProcessesOnEtcd(t *testing.T) {
	cfg := hubConfig()
	cfg.HeartbeatIntervalMS = 200
	cfg.HeartbeatMaxFailures = 2
	h := startHubOn(t, cfg, etcdStore(t, newPrefix()))
	nodes := []*nodeProc{startNodeProc(t, h, "n1"), startNodeProc(t, h, "n2"), startNodeProc(t, h, "n3")}
	for _, n := range nodes {
		if _, ok := h.Store().LookupInstance(n.id); !ok {
			t.Fatalf("node %s is not in the hub's store", n.name)
		}
	}
	// Each node reaches all three by the service name, itself included (a
	// node's call to itself runs its own handler).
	for _, n := range nodes {
		fmt.Fprintln(n.stdin, "call 3")
		if got := n.next(t); got != "saw n1,n2,n3" {
			t.Fatalf("node %s calling the service: %q, want %q", n.name, got, "saw n1,n2,n3")
		}
	}

	resp, err := http.Get(pubURL(h) + protocol.PathWatchInstances)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	victim := nodes[2]
	if s := readSnapshot(t, rd); !snapshotHas(s, victim.id) {
		t.Fatal("the watch does not show the node")
	}
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var gone time.Duration
	for {
		s := readSnapshot(t, rd)
		if !snapshotHas(s, victim.id) && gone == 0 {
			gone = time.Since(killed)
		}
		// The entry leaves first; its services go when the removal is
		// delivered, which the next snapshot shows.
		if gone != 0 && len(s.Services) == 1 && len(s.Services[0].Instances) == 2 {
			t.Logf("the hub removed the killed node %v after SIGKILL (probe interval %d ms, max failures %d: %.1f intervals)",
				gone.Round(time.Millisecond), cfg.HeartbeatIntervalMS, cfg.HeartbeatMaxFailures,
				float64(gone.Milliseconds())/float64(cfg.HeartbeatIntervalMS))
			break
		}
	}
	if _, ok := h.Store().LookupInstance(victim.id); ok {
		t.Fatal("the store still holds the killed node")
	}
	for _, n := range nodes[:2] {
		fmt.Fprintln(n.stdin, "call 2")
		if got := n.next(t); got != "saw n1,n2" {
			t.Fatalf("node %s after the kill: %q, want %q", n.name, got, "saw n1,n2")
		}
	}
}

func readSnapshot(t *testing.T, rd *bufio.Reader) protocol.InstancesSnapshot {
	t.Helper()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("instance watch ended: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			var s protocol.InstancesSnapshot
			if err := json.Unmarshal([]byte(line[6:]), &s); err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
}

func snapshotHas(s protocol.InstancesSnapshot, id ext.InstanceID) bool {
	for _, v := range s.Instances {
		if v.Peer.InstanceID == id {
			return true
		}
	}
	return false
}
