package hostile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/transport/tcp"
)

// Frame is one active-message request as a raw peer writes it: the
// messenger preamble, the request header with a response id whose low 64
// bits name sender (the worker the frame claims to come from) and whose
// high 64 bits are token, then the payload. headers may be nil.
func Frame(rt msgwire.ResponseType, sender ext.WorkerID, token uint64, handler string, headers map[string]string, payload []byte) []byte {
	var hb []byte
	if len(headers) > 0 {
		var err error
		if hb, err = msgwire.EncodeHeaders(headers); err != nil {
			panic(err) // the cases build their headers; a bad one is a bug here
		}
	}
	h := []byte{1, byte(rt)}
	h = binary.LittleEndian.AppendUint64(h, uint64(sender))
	h = binary.LittleEndian.AppendUint64(h, token)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(handler)))
	h = append(h, handler...)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(hb)))
	h = append(h, hb...)
	return frame.Append(nil, ext.Frame{Type: ext.Message, Header: h, Payload: payload})
}

// Batch encodes one _stream_batch payload: the header of lane, epoch and
// seq, then what records appends. It panics on what the encoder refuses,
// which is a bug in a case.
func Batch(lane int, epoch uint64, seq uint32, records func(e *muxwire.Encoder) error) []byte {
	var e muxwire.Encoder
	if err := e.Start(nil, lane, epoch, seq); err != nil {
		panic(err)
	}
	if records != nil {
		if err := records(&e); err != nil {
			panic(err)
		}
	}
	return e.Batch()
}

// BatchFrame is a fire-and-forget _stream_batch request carrying batch,
// claiming sender.
func BatchFrame(sender ext.WorkerID, lane int, batch []byte, headers map[string]string) []byte {
	return Frame(msgwire.FireAndForget, sender, 0, muxwire.HandlerName(lane), headers, batch)
}

// U128 is the decimal form of hi<<64 | lo, as JSON bodies and the _rv
// header carry 128-bit numbers.
func U128(hi, lo uint64) string {
	v := new(big.Int).SetUint64(hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(lo)).String()
}

// RawConn is a bare TCP connection to a node's messenger listener. What
// the node writes back is read and thrown away, so that its writes never
// block; Closed reports when the node closed the connection.
type RawConn struct {
	c      net.Conn
	closed atomic.Bool
	done   chan struct{}
	sent   atomic.Int64 // frames written
}

// DialRaw connects to the TCP endpoint in info's address.
func DialRaw(info ext.PeerInfo) (*RawConn, error) {
	ep, err := info.Address.Lookup(tcp.Key)
	if err != nil {
		return nil, err
	}
	addr, err := tcp.DialAddr(ep)
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &RawConn{c: c, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		io.Copy(io.Discard, c)
		r.closed.Store(true)
	}()
	return r, nil
}

// Write writes frames, packed into writes of about 64 KiB. It stops at the
// first error (the node closed the connection) and returns it.
func (r *RawConn) Write(frames ...[]byte) error {
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := r.c.Write(buf)
		buf = buf[:0]
		return err
	}
	for _, f := range frames {
		buf = append(buf, f...)
		r.sent.Add(1)
		if len(buf) >= 64<<10 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Sent is how many frames Write took.
func (r *RawConn) Sent() int64 { return r.sent.Load() }

// Closed says whether the node closed the connection.
func (r *RawConn) Closed() bool { return r.closed.Load() }

// Close closes the connection and waits for its reader.
func (r *RawConn) Close() {
	r.c.Close()
	<-r.done
}

// Drained waits until the node has read every byte written on the
// connection (the kernel's queues on both ends are empty), the node closed
// it, or timeout passed. It reads /proc/net/tcp: the node's own counters
// cannot tell this connection's frames from its legit peer's.
func (r *RawConn) Drained(timeout time.Duration) error {
	local, remote := r.c.LocalAddr().String(), r.c.RemoteAddr().String()
	deadline := time.Now().Add(timeout)
	empty := 0
	for {
		if r.closed.Load() {
			return nil
		}
		tx, rx, err := socketQueues(local, remote)
		switch {
		case err != nil:
			return err
		case tx == 0 && rx == 0:
			empty++
			if empty >= 2 { // twice in a row: nothing was in flight between the reads
				return nil
			}
		default:
			empty = 0
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the node left %d bytes unread on the connection after %v", tx+rx, timeout)
		}
		time.Sleep(2 * time.Millisecond) // polls a kernel counter; nothing to wait on
	}
}

// socketQueues returns the bytes not yet acknowledged on the local end of
// a loopback TCP connection and the bytes the remote end has received but
// not read, from /proc/net/tcp.
func socketQueues(local, remote string) (tx, rx int64, err error) {
	l, err := procAddr(local)
	if err != nil {
		return 0, 0, err
	}
	rm, err := procAddr(remote)
	if err != nil {
		return 0, 0, err
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		q := strings.SplitN(fs[4], ":", 2)
		if len(q) != 2 {
			continue
		}
		txq, _ := strconv.ParseInt(q[0], 16, 64)
		rxq, _ := strconv.ParseInt(q[1], 16, 64)
		switch {
		case fs[1] == l && fs[2] == rm:
			tx += txq
			found++
		case fs[1] == rm && fs[2] == l:
			rx += rxq
			found++
		}
	}
	if found == 0 {
		return 0, 0, errors.New("the connection is not in /proc/net/tcp")
	}
	return tx, rx, sc.Err()
}

// procAddr writes an IPv4 host:port as /proc/net/tcp does: the address as
// a little-endian word in hex, the port in hex.
func procAddr(hostport string) (string, error) {
	ap, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return "", err
	}
	ip := ap.IP.To4()
	if ip == nil {
		return "", fmt.Errorf("%s is not IPv4", hostport)
	}
	return fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(ip), ap.Port), nil
}
