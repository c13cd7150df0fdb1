package streaming

import (
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// The path a sender took, for tests that look inside it: nil when the
// sender took another one.

func (s *Sender[T]) slot() *mux.OutSlot            { x, _ := s.sink.(*mux.OutSlot); return x }
func (s *Sender[T]) stream() *framepath.Stream     { x, _ := s.sink.(*framepath.Stream); return x }
func (s *MPSCSender[T]) slot() *mux.OutSlot        { x, _ := s.sink.(*mux.OutSlot); return x }
func (s *MPSCSender[T]) stream() *framepath.Stream { x, _ := s.sink.(*framepath.Stream); return x }
