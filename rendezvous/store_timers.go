package rendezvous

import "time"

// The store's two timers. The sweep ends slots past their time-to-live
// and chunked leases past their deadline, every sweepEvery. The reaper
// ends RDMA leases past theirs, every reapEvery (rdmapath.ReapEvery of the
// lease timeout): the owner never sees a GET, so a consumer that died
// mid-GET would otherwise hold its read lock forever. Each timer runs only
// while something has its kind of deadline, so a node that stages nothing
// with one arms no timer, and each exits on its first pass with nothing
// left. They are two goroutines rather than one because their periods
// differ by orders of magnitude (100 ms and 15 s by default) and the
// reaper's must follow the lease timeout, down to 10 ms.

// addDeadlineLocked counts a deadline and starts the sweep if none runs.
func (s *store) addDeadlineLocked() {
	s.deadlines++
	s.startLocked(&s.sweeping, sweepEvery, s.sweepOnce)
}

// startLocked starts a timer goroutine unless it runs or the store closed.
func (s *store) startLocked(running *bool, every time.Duration, pass func() bool) {
	if *running || s.closed {
		return
	}
	*running = true
	s.wg.Add(1)
	go s.tick(every, pass)
}

// tick runs pass every period until it reports nothing left or close.
func (s *store) tick(every time.Duration, pass func() bool) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !pass() {
			return
		}
	}
}

// sweepOnce runs one pass of the sweep; false when it should exit.
func (s *store) sweepOnce() bool {
	s.mu.Lock()
	defer s.unlock()
	now := s.now()
	ended := 0
	for lid, l := range s.leases {
		if !l.rdma && l.timeout > 0 && now.After(l.deadline) {
			s.releaseLeaseLocked(lid, l)
			ended++
		}
	}
	for id, sl := range s.slots {
		if !sl.expires.IsZero() && now.After(sl.expires) {
			for lid, l := range s.leases {
				if l.local == id {
					s.dropLeaseLocked(lid, l)
				}
			}
			s.freeLocked(id, sl)
			ended++
		}
	}
	if ended > 0 && s.onExpire != nil {
		s.onExpire(ended)
	}
	if s.deadlines <= 0 || s.closed {
		s.sweeping = false
		return false
	}
	return true
}

// armRDMA makes lease lid an RDMA lease with a deadline of timeout,
// renewed by _rv_lease_renew (or a pull), and starts the reaper. A
// chunked deadline the acquire asked for gives way to it. False when the
// lease is gone already (its slot's time-to-live ended it).
func (s *store) armRDMA(lid uint64, timeout time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[lid]
	if !ok {
		return false
	}
	if !l.rdma {
		if l.timeout > 0 {
			s.deadlines--
		}
		l.rdma = true
		s.rdmaLive++
	}
	l.timeout, l.deadline = timeout, s.now().Add(timeout)
	s.startLocked(&s.reaping, s.reapEvery, s.reapOnce)
	return true
}

// reapOnce runs one pass of the reaper: RDMA leases past their deadline
// lose their read lock, as a detach would; false when it should exit.
func (s *store) reapOnce() bool {
	s.mu.Lock()
	defer s.unlock()
	now := s.now()
	ended := 0
	for lid, l := range s.leases {
		if l.rdma && now.After(l.deadline) {
			s.releaseLeaseLocked(lid, l)
			ended++
		}
	}
	if ended > 0 && s.onReap != nil {
		s.onReap(ended)
	}
	if s.rdmaLive <= 0 || s.closed {
		s.reaping = false
		return false
	}
	return true
}

// close stops both timers and waits for them.
func (s *store) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	// The node is done: its slots are read no more (take refuses from now
	// on), but for chunks a transport may still hold (unborrow keeps those
	// listed).
	for _, sl := range s.slots {
		unborrow(sl)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
