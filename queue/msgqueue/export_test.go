package msgqueue

// Polling is how many calls wait for an item of s.
func (s *Service) Polling() int64 { return s.polling.Load() }
