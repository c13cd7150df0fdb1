package client_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/transport/tcp"
)

// nodeProcessEnv makes the test binary a node process: it joins the hub
// at VELO_HUB_URL, serves "whoami" as the service "mesh" under the name
// VELO_NODE_NAME, prints "ready <instance id>", and then answers commands
// on stdin: "call N" calls velo.Service("mesh") until it has heard N
// distinct names and prints "saw a,b,c". EOF on stdin stops it.
const nodeProcessEnv = "VELO_HUB_TEST_NODE"

func nodeProcess() int {
	ctx := context.Background()
	name := os.Getenv("VELO_NODE_NAME")
	tr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	node, hc, err := client.JoinWith(ctx, client.Config{URL: os.Getenv("VELO_HUB_URL"), Logger: quiet},
		velo.WithTransport(tr), velo.WithLogger(quiet))
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	node.Register(velo.UnaryHandler("whoami", func(*velo.Context) ([]byte, error) { return []byte(name), nil }))
	if err := node.RegisterService(ctx, "mesh"); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	fmt.Printf("ready %s\n", node.InstanceID())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "call %d", &n); err == nil {
			fmt.Println(callMesh(ctx, node, n))
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	node.Shutdown(sctx)
	hc.Close()
	return 0
}

// callMesh calls the service until n distinct names answered (or 200
// calls), and says which.
func callMesh(ctx context.Context, node *velo.Node, n int) string {
	seen := map[string]bool{}
	for i := 0; i < 200 && len(seen) < n; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, err := node.Unary(cctx, velo.Service("mesh"), "whoami", nil)
		cancel()
		if err == nil {
			seen[string(b)] = true
		} else {
			time.Sleep(20 * time.Millisecond) // the picker skips a failed instance; try again
		}
	}
	var names []string
	for k := range seen {
		names = append(names, k)
	}
	slices.Sort(names)
	return "saw " + strings.Join(names, ",")
}
