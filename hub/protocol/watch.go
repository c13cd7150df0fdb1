package protocol

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// WatchEventType names a server-sent event of a service watch. It is both
// the SSE "event:" field and the Type of the WatchEvent in "data:".
type WatchEventType string

// The events of GET /v1/services/{name}/watch, in the order a stream can
// carry them: one initial, then any number of added and removed.
const (
	WatchInitial WatchEventType = "initial"
	WatchAdded   WatchEventType = "added"
	WatchRemoved WatchEventType = "removed"
)

// WatchEvent is the data of one watch event. Initial carries every
// instance present when the watch began (possibly none); added and
// removed carry one.
type WatchEvent struct {
	Type      WatchEventType   `json:"type"`
	Name      string           `json:"name"`
	Instances []ext.InstanceID `json:"instances"`
}

// WatchBacklog is how many changes a watcher may fall behind before the
// hub ends its stream. Its set is then stale: it watches again.
const WatchBacklog = 128

// WatchKeepAlive is the interval of the SSE comment line (": keep-alive")
// that the hub sends on an idle watch.
const WatchKeepAlive = 10 * time.Second

// WatchContentType is the content type of a watch stream.
const WatchContentType = "text/event-stream"
