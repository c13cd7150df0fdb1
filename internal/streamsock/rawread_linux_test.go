package streamsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The frames of an accepted TCP connection are read with raw read calls,
// without allocating; end of stream, a passed deadline and a local close
// read as they do through net.Conn.
func TestAcceptedTCPReadsRaw(t *testing.T) {
	client, server := tcpPair(t)
	g, _ := newStallGuard(server, 1<<20, time.Minute, nil)
	rr, ok := g.src.(*rawReader)
	if !ok {
		t.Fatalf("a TCP connection is read through %T, not the raw reader", g.src)
	}
	msg := []byte("0123456789")
	buf := make([]byte, 64)
	if !raceBuild {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := client.Write(msg); err != nil {
				t.Fatal(err)
			}
			if n, err := io.ReadFull(rr, buf[:len(msg)]); err != nil || n != len(msg) {
				t.Fatalf("read %d, %v", n, err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%v allocations per raw read, want 0", allocs)
		}
	}
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	if n, err := io.ReadFull(rr, buf[:len(msg)]); err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	server.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := rr.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	server.SetReadDeadline(time.Time{})
	client.Close()
	if n, err := rr.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v, want io.EOF", n, err)
	}
	server.Close()
	if _, err := rr.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after a local close: %v, want net.ErrClosed", err)
	}
}

func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// pacedWriterEnv names the address a child of TestRawReadsLeaveSysmonAsleep
// writes to.
const pacedWriterEnv = "STREAMSOCK_PACED_WRITER"

// pacedFrames is how many writes the child makes, pacedGap apart.
const (
	pacedFrames = 150
	pacedGap    = 2 * time.Millisecond
)

// TestPacedWriter is the child's part: it writes to the parent's address
// every pacedGap, from a process of its own, so that nothing in the parent
// runs between two arrivals but the read.
func TestPacedWriter(t *testing.T) {
	addr := os.Getenv(pacedWriterEnv)
	if addr == "" {
		t.Skip("the child of TestRawReadsLeaveSysmonAsleep")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range pacedFrames {
		time.Sleep(pacedGap)
		if _, err := c.Write([]byte("frame")); err != nil {
			t.Fatal(err)
		}
	}
	// Close once the parent did: the parent reads to the end.
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
}

// A read that wakes an idle process must not wake the runtime's monitor
// thread. Entering a system call does that when every P was idle (the
// monitor sleeps deeply then), and the monitor then ticks every ~20 µs
// until the process is idle again: about two context switches of that
// thread for every arrival. Raw reads enter no system call state. The
// test counts the monitor thread's voluntary switches while another
// process writes every 2 ms: about two per arrival with net.Conn reads, a
// handful in all with raw reads (its idle ticks, growing to 10 ms).
func TestRawReadsLeaveSysmonAsleep(t *testing.T) {
	if raceBuild {
		t.Skip("under the race detector a raw read makes a zero-byte read through package syscall")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPacedWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), pacedWriterEnv+"="+ln.Addr().String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	src := newConnReader(conn)
	sysmon := monitorThread(t)
	buf := make([]byte, 64)
	if _, err := src.Read(buf); err != nil { // the first arrival: the child runs
		t.Fatal(err)
	}
	before := voluntarySwitches(t, sysmon)
	arrivals := 0
	for {
		_, err := src.Read(buf)
		if err == io.EOF {
			conn.Close()
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		arrivals++
	}
	switches := voluntarySwitches(t, sysmon) - before
	t.Logf("%d arrivals, %d switches of the monitor thread", arrivals, switches)
	if arrivals < pacedFrames/2 {
		t.Fatalf("only %d arrivals were reads of their own", arrivals)
	}
	if switches > arrivals/3 {
		t.Fatalf("the monitor thread switched %d times over %d arrivals: its reads wake it", switches, arrivals)
	}
}

// monitorThread is the runtime's monitor thread (sysmon): the first thread
// the runtime starts after the main one, before any init runs.
func monitorThread(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	var tids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, id)
		}
	}
	slices.Sort(tids)
	if len(tids) < 2 || tids[0] != os.Getpid() {
		t.Skipf("threads %v: cannot tell the monitor thread", tids)
	}
	return tids[1]
}

func voluntarySwitches(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/self/task", strconv.Itoa(tid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no voluntary_ctxt_switches in the thread's status")
	return 0
}
