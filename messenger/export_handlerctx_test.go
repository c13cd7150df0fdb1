package messenger

// ResponseIDOf is the response id of the request c serves: what a test
// that forges a cancel names.
func ResponseIDOf(c *Context) ResponseID { return ResponseID{Lo: uint64(c.sender), Hi: c.token} }

// HandlerContexts is how many handler contexts m has registered now, and
// how many cancels wait as tombstones for a handler that has not asked.
func (m *Messenger) HandlerContexts() (live, tombstones int) {
	m.hctx.mu.Lock()
	defer m.hctx.mu.Unlock()
	return len(m.hctx.live), len(m.hctx.tombs)
}
