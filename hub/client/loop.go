package client

import (
	"context"
	"errors"
	"time"
)

// loop is the client's one background goroutine: it registers again
// after a hub restart, sends service changes left unsettled, retries
// both after Config.RetryInterval, and sends the HTTP heartbeat of a
// RegisterPeer registration. It ends at the last Close.
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
				rctx, c := context.WithTimeout(ctx, DefaultRequestTimeout)
				if err := s.heartbeatHTTP(rctx); err != nil {
					s.log.Warn("hub client: heartbeat failed", "err", err)
				}
				c()
			}
		}
		if s.work(ctx) {
			retry.Reset(s.cfg.RetryInterval)
		}
	}
}

// work does what the loop was kicked for and reports whether something
// is left to retry.
func (s *state) work(ctx context.Context) (again bool) {
	rctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	s.mu.Lock()
	recov := s.recover && s.reg != nil
	node, peer, exts := s.node, s.peer, s.payloads
	s.mu.Unlock()
	if recov {
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
	}
	if err := s.syncServices(rctx); err != nil && !errors.Is(err, ErrNotRegistered) {
		s.log.Warn("hub client: service changes left for the next pass", "err", err)
		return true
	}
	return false
}
