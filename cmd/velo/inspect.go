package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/velo-go/velo"
)

// `velo inspect URL`: the live view of a node (velo.DebugHandler) in a
// terminal.

const inspectUsage = `usage: velo inspect [--watch] [--interval 1s] [--json] URL

Prints the live view a node serves with velo.DebugHandler (the page at
URL, e.g. http://127.0.0.1:6060/debug/velo): its peers, calls in flight,
the stream mux per peer, anchors by phase, rendezvous slots and recent
peer events. --watch prints it again every interval until interrupted;
--json prints the JSON as the node sent it.`

func runInspect(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return inspect(ctx, os.Stdout, args)
}

func inspect(ctx context.Context, w io.Writer, args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() { fmt.Fprintln(w, inspectUsage) }
	watch := fs.Bool("watch", false, "print again every interval until interrupted")
	every := fs.Duration("interval", time.Second, "how often --watch reads the node")
	raw := fs.Bool("json", false, "print the JSON as the node sent it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitCode(2)
	}
	u, err := jsonURL(fs.Arg(0))
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		body, err := fetchView(ctx, client, u)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		if *watch {
			fmt.Fprint(w, "\033[H\033[2J") // home and clear, as watch(1) does
		}
		if *raw {
			w.Write(body)
		} else if err := printView(w, body); err != nil {
			return err
		}
		if !*watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*every):
		}
	}
}

// jsonURL is the JSON form of a debug page's URL.
func jsonURL(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("inspect: %w", err)
	}
	if !strings.HasSuffix(u.Path, ".json") {
		q := u.Query()
		q.Set("format", "json")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

func fetchView(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("inspect: %s: %s", u, resp.Status)
	}
	return body, nil
}

func printView(w io.Writer, body []byte) error {
	var s velo.Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("inspect: not a velo debug view: %w", err)
	}
	if s.Instance == "" {
		return errors.New("inspect: not a velo debug view: no instance")
	}
	fmt.Fprintf(w, "velo node %s  worker %s  at %s\n", s.Instance, s.Worker, s.Taken.Format(time.TimeOnly))
	fmt.Fprintf(w, "calls in flight %d (oldest %s)  running handlers %d  rendezvous %d slots, %d bytes, %d leases\n",
		s.Calls.InFlight, viewSecs(s.Calls.OldestCallSeconds), s.Calls.RunningHandlers, s.Rendezvous.Slots, s.Rendezvous.Bytes, s.Rendezvous.Leases)

	others := 0
	for _, p := range s.Peers {
		if !p.Self {
			others++
		}
	}
	viewSection(w, fmt.Sprintf("PEERS (%d)", others))
	t := viewTable(w, "INSTANCE", "WORKER", "PRIMARY", "LANES", "HANDSHAKE", "CONNECTED", "LOST", "IN FLIGHT", "OLDEST", "UNDELIVERED")
	for _, p := range s.Peers {
		conn := "no"
		if p.Connected {
			conn = "yes"
			if p.ConnectedSince != nil {
				conn = "since " + p.ConnectedSince.Format(time.TimeOnly)
			}
		}
		oldest := ""
		if p.InFlight > 0 {
			oldest = viewSecs(p.OldestCallSeconds)
		}
		inst := p.Instance
		if p.Self {
			inst += " (this node)"
		}
		viewRow(t, inst, p.Worker, p.Primary, p.Lanes, p.Handshake, conn, p.ConnectionsLost, p.InFlight, oldest, p.Undelivered)
	}
	t.Flush()

	viewSection(w, "LANES")
	t = viewTable(w, "PEER", "TRANSPORT", "LANE", "CONNECTED", "REMOTE", "FRAMES", "BYTES", "QUEUED", "WAITING", "LAST WRITE", "RECONNECTS")
	for _, p := range s.Peers {
		for _, l := range p.LaneStats {
			conn, last := "no", "-"
			if l.Connected {
				conn = "yes"
			}
			if l.LastWrite != nil {
				last = l.LastWrite.Format(time.TimeOnly)
			}
			remote := l.Remote
			if remote == "" {
				remote = "-"
			}
			viewRow(t, p.Instance, l.Transport, l.Lane, conn, remote, l.FramesWritten, l.BytesWritten,
				fmt.Sprintf("%d/%dB", l.QueuedFrames, l.QueuedBytes), l.Waiting, last, l.Reconnects)
		}
	}
	t.Flush()

	viewSection(w, "MUX")
	t = viewTable(w, "PEER", "SIDE", "LANE", "STATE", "LIVE", "CREDIT", "STARVED", "WITHHELD", "HELD", "BUDGET")
	for _, m := range s.Mux {
		peer := m.Instance
		if peer == "" {
			peer = m.Worker
		}
		budget := fmt.Sprintf("%d/%d", m.BudgetBytes, m.BudgetLimit)
		for _, b := range m.Batchers {
			viewRow(t, peer, "egress", b.Lane, b.State, b.LiveSlots, fmt.Sprintf("%d/%d", b.Credit, b.Window), b.Starved, b.Withheld, "", budget)
		}
		for _, ip := range m.Ingress {
			viewRow(t, peer, "ingress", ip.Lane, "", ip.LiveSlots, ip.Credit, "", "", ip.HeldRecords, budget)
		}
	}
	t.Flush()

	viewSection(w, fmt.Sprintf("ANCHORS (%d)", s.Anchors.Total))
	phases := make([]string, 0, len(s.Anchors.ByPhase))
	for k := range s.Anchors.ByPhase {
		phases = append(phases, k)
	}
	sort.Strings(phases)
	var counts []string
	for _, k := range phases {
		counts = append(counts, fmt.Sprintf("%s %d", k, s.Anchors.ByPhase[k]))
	}
	fmt.Fprintln(w, strings.Join(counts, "  "))
	t = viewTable(w, "ANCHOR", "PHASE", "VIA", "QUEUED", "AGE", "EXPIRES IN")
	for _, a := range s.Anchors.Oldest {
		exp := ""
		if a.ExpiresInSeconds != nil {
			exp = viewSecs(*a.ExpiresInSeconds)
		}
		viewRow(t, a.ID, a.Phase, a.Via, a.Queued, viewSecs(a.AgeSeconds), exp)
	}
	t.Flush()

	viewSection(w, "EVENTS")
	t = viewTable(w, "AT", "KIND", "INSTANCE", "DETAIL")
	for i := len(s.Events) - 1; i >= 0; i-- { // newest first
		e := s.Events[i]
		var detail []string
		for _, d := range []string{e.Transport, e.Remote, e.NewInstance, e.Err} {
			if d != "" {
				detail = append(detail, d)
			}
		}
		viewRow(t, e.At.Format(time.TimeOnly), e.Kind, e.Instance, strings.Join(detail, " "))
	}
	return t.Flush()
}

func viewSection(w io.Writer, name string) { fmt.Fprintf(w, "\n%s\n", name) }

func viewTable(w io.Writer, heads ...string) *tabwriter.Writer {
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, strings.Join(heads, "\t"))
	return t
}

func viewRow(t *tabwriter.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(t, strings.Join(s, "\t"))
}

func viewSecs(v float64) string { return fmt.Sprintf("%.1fs", v) }
