package streamsock

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Reads without entering the scheduler's system-call state.
//
// A connection's sockets are non-blocking (the net package's poller), so a
// read returns at once: data, EAGAIN, or an error. Made as a plain
// system call (net.Conn.Read), it first tells the runtime that the
// goroutine enters a system call, and when every P was idle until then the
// runtime's monitor thread (sysmon) sleeps deeply and the entry wakes it
// (a futex call, a thread woken on another core) and resets its tick to
// 20 µs for the next 50 ticks while any P is busy; with no such wakes the
// tick doubles up to 10 ms. A read that wakes a reader between two forward passes of
// a producer (a batch of credit replies) paid that on every arrival: on an
// engine at one pass per millisecond, 3.6 sysmon ticks per pass, 1.2 with
// raw reads. A raw read has none of it and skips the enter and exit too; it still waits on the poller as the
// net package does, since the callback of syscall.RawConn.Read runs the
// read and says when to wait.
//
// Only reads of at most rawReadMax bytes go raw: the runtime cannot take
// the P from a goroutine in a raw call, and a read into a large
// destination (a rendezvous payload, read in place) may copy for longer.

// rawReadMax is the largest read made raw: the frame reader's largest
// buffer (frame.maxReadChunk), above the mux's largest batch.
const rawReadMax = 128 << 10

// rawReader reads a TCP or Unix socket with raw read calls.
type rawReader struct {
	conn net.Conn
	rc   syscall.RawConn
	// The read in progress: the callback's arguments and results. A
	// method value made once, so that a read allocates nothing.
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// newConnReader returns what a connection's frames are read through: a
// rawReader for the net package's TCP and Unix sockets, else conn itself.
func newConnReader(conn net.Conn) io.Reader {
	var sc syscall.Conn
	switch c := conn.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return conn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	r := &rawReader{conn: conn, rc: rc}
	r.fn = r.readFd
	return r
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 || len(p) > rawReadMax {
		return r.conn.Read(p)
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Read(r.fn)
	n, errno := r.n, r.errno
	r.p = nil
	switch {
	case err != nil:
		// Closed, or the read deadline passed: the poller's error, as a
		// net.Conn read would report it.
		return 0, &net.OpError{Op: "read", Net: r.conn.LocalAddr().Network(), Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: unwrapOp(err)}
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: r.conn.LocalAddr().Network(), Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFd is the RawConn callback: false asks the poller to wait until the
// socket is readable.
func (r *rawReader) readFd(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.n, r.errno = int(n), e
		if e == 0 && n > 0 {
			raceRead(fd, r.p[:n])
		}
		return true
	}
}

// unwrapOp takes the cause out of the net package's "raw-read" OpError.
func unwrapOp(err error) error {
	if op, ok := err.(*net.OpError); ok {
		return op.Err
	}
	return err
}
