package client

import (
	"context"
	"errors"
	"time"
)

// loop is the client's one background goroutine: it registers again
// after a hub restart, sends service changes left unsettled, retries
// both after Config.RetryInterval, sends the HTTP heartbeat of a
// RegisterPeer registration, and asks the hub with one HTTP heartbeat
// when its probes fall silent. It ends at the last Close.
func (s *state) loop() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
		case <-s.done:
		}
		cancel()
	}()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	hb := time.NewTicker(s.cfg.HeartbeatInterval)
	defer hb.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-retry.C:
		case <-hb.C:
			s.mu.Lock()
			beat := s.httpHB && s.reg != nil
			s.mu.Unlock()
			if beat {
				s.beat(ctx, "hub client: heartbeat failed")
			}
		case <-quiet.C:
			if s.checkSilence(time.Now()) {
				s.log.Info("hub client: no probe from the hub for a while; asking it with a heartbeat", "instance", s.instance())
				s.beat(ctx, "hub client: heartbeat after the probes fell silent failed")
			}
		}
		if s.work(ctx) {
			retry.Reset(s.cfg.RetryInterval)
		}
		if d, ok := s.nextSilenceCheck(time.Now()); ok {
			quiet.Reset(d)
		} else {
			quiet.Stop()
		}
	}
}

// beat sends one HTTP heartbeat and logs its failure.
func (s *state) beat(ctx context.Context, msg string) {
	rctx, c := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer c()
	if err := s.heartbeatHTTP(rctx); err != nil {
		s.log.Warn(msg, "err", err)
	}
}

// work does what the loop was kicked for and reports whether something
// is left to retry.
func (s *state) work(ctx context.Context) (again bool) {
	rctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	s.mu.Lock()
	recov := s.recover && s.reg != nil
	rejoin := s.rejoin && s.reg == nil && !s.left && !s.closed
	node, peer, exts := s.node, s.peer, s.payloads
	s.mu.Unlock()
	switch {
	case recov:
		s.log.Info("hub client: the hub restarted; registering again with the credential", "instance", peer.InstanceID)
		if err := s.register(rctx, node, peer, exts); err != nil {
			s.log.Warn("hub client: recovery after a hub restart failed", "err", err)
			s.mu.Lock()
			again = s.recover && s.reg != nil
			s.mu.Unlock()
			if again {
				return true
			}
		}
	case rejoin:
		s.log.Info("hub client: the hub no longer holds the registration; registering again", "instance", peer.InstanceID)
		if err := s.register(rctx, node, peer, exts); err != nil {
			s.log.Warn("hub client: registering again failed", "err", err)
			s.mu.Lock()
			again = s.rejoin && s.reg == nil && !s.left && !s.closed
			s.mu.Unlock()
			if again {
				return true
			}
		}
	}
	if err := s.syncServices(rctx); err != nil && !errors.Is(err, ErrNotRegistered) {
		s.log.Warn("hub client: service changes left for the next pass", "err", err)
		return true
	}
	return false
}

// instance is the id of the peer the client registers, for logs.
func (s *state) instance() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peer.InstanceID.String()
}
