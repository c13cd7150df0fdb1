package velo

import (
	"sort"
	"time"
)

// maxSightings bounds what one kind of sighting remembers: past it, new
// entries are not remembered and read as just seen.
const maxSightings = 1 << 16

// sightings measures how long things that carry no timestamp (a call in
// flight, an anchor) have been around: from the first snapshot that saw
// each. Each snapshot sees what exists now and then rolls, which forgets
// whatever it did not see; the two maps are kept and reused, so a steady
// node allocates nothing here. The caller serialises use.
type sightings[K comparable] struct {
	seen, next map[K]time.Time
}

// see notes k as present at now and returns how long it has been seen.
func (s *sightings[K]) see(k K, now time.Time) time.Duration {
	if s.next == nil {
		s.seen, s.next = map[K]time.Time{}, map[K]time.Time{}
	}
	first, ok := s.seen[k]
	if !ok {
		first = now
	}
	if len(s.next) < maxSightings {
		s.next[k] = first
	}
	return now.Sub(first)
}

// roll ends a snapshot: what it saw is what the next one remembers.
func (s *sightings[K]) roll() {
	s.seen, s.next = s.next, s.seen
	clear(s.next)
}

// oldest keeps the OldestAnchorsListed oldest anchors seen, in a small
// slice kept sorted oldest first: a walk of many anchors allocates
// nothing past the list.
type oldest struct {
	ages    []time.Duration
	anchors []AnchorSnapshot
}

// wants says whether an anchor of age would make the list, before the
// caller builds its entry.
func (o *oldest) wants(age time.Duration) bool {
	return len(o.ages) < OldestAnchorsListed || age > o.ages[len(o.ages)-1]
}

func (o *oldest) add(age time.Duration, s AnchorSnapshot) {
	i := sort.Search(len(o.ages), func(i int) bool { return o.ages[i] < age })
	if len(o.ages) == OldestAnchorsListed {
		o.ages, o.anchors = o.ages[:len(o.ages)-1], o.anchors[:len(o.anchors)-1]
	}
	o.ages = append(o.ages, 0)
	o.anchors = append(o.anchors, AnchorSnapshot{})
	copy(o.ages[i+1:], o.ages[i:])
	copy(o.anchors[i+1:], o.anchors[i:])
	o.ages[i], o.anchors[i] = age, s
}

func (o *oldest) list() []AnchorSnapshot {
	if o.anchors == nil {
		return []AnchorSnapshot{}
	}
	return o.anchors
}
