package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/hub/protocol"
)

// Default timeouts of the HTTP client New builds.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultRequestTimeout = 60 * time.Second
)

// maxAnswer bounds what the client reads of one answer.
const maxAnswer = 16 << 20

// defaultHTTP is the client for requests (60 s each, 5 s to connect) and
// the one for watch streams, which share its transport but have no
// overall timeout: a watch stays open.
func defaultHTTP() (req, stream *http.Client) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: DefaultConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.Proxy = nil
	return &http.Client{Transport: tr, Timeout: DefaultRequestTimeout}, &http.Client{Transport: tr}
}

// listener says which of the hub's listeners a request goes to.
type listener uint8

const (
	public listener = iota
	control
)

func (s *state) url(l listener, path string) string {
	if l == public {
		return s.pubURL + path
	}
	return s.ctlURL + path
}

// do sends one request and decodes a 2xx answer into out (when not nil).
// It tells three failures apart, as the fault rules need: a *HubError
// (the hub answered with its ErrorBody), a *NoAnswerError (the request
// may have reached the hub but no answer of the hub came back), and any
// other error, for a request that never left.
func (s *state) do(ctx context.Context, l listener, op, method, path string, cred protocol.Credential, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("hub client: %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	// sent is about the last attempt: the transport tries a GET again on
	// a new connection when a kept-alive one broke before any answer, and
	// a hub that is gone then refuses the new dial (unreachable, not a
	// lost answer). It tries a request that mutates again only when
	// nothing of it was written.
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{GetConn: func(string) { sent.Store(false) }, WroteHeaders: func() { sent.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, s.url(l, path), body)
	if err != nil {
		return fmt.Errorf("hub client: %s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cred != "" {
		req.Header.Set(protocol.CredentialHeader, string(cred))
	}
	resp, err := s.http.Do(req)
	if err != nil {
		if sent.Load() {
			return &NoAnswerError{Op: op, Err: err}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("hub client: %s: %w", op, err)
		}
		return fmt.Errorf("hub client: %s: %w: %w", op, ErrHubUnreachable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &NoAnswerError{Op: op, Err: err}
	}
	if resp.StatusCode >= 300 {
		e := protocol.ParseError(resp.StatusCode, b)
		if e.Code == "" {
			// Not the hub's ErrorBody: a proxy's page (502, 504, ...).
			return &NoAnswerError{Op: op, Err: fmt.Errorf("HTTP %d without an ErrorBody", resp.StatusCode)}
		}
		return fmt.Errorf("hub client: %s: %w", op, e)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return &NoAnswerError{Op: op, Err: fmt.Errorf("answer is not the expected JSON: %w", err)}
		}
	}
	return nil
}

// code is the ErrorCode of a hub answer in err, "" for any other error.
func code(err error) protocol.ErrorCode {
	var e *HubError
	if err == nil || !asHub(err, &e) {
		return ""
	}
	return e.Code
}
