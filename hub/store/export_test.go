package store

// ViewVisits is how many entries the store's scans have visited.
func ViewVisits(s *InMemoryStore) int64 { return s.view.Visits() }
