// Package streamsock is the messenger transport over stream sockets that
// TCP and UDS share: peers, lanes, the admission gate, the coalescing writer,
// the frame reader, the drain echo and teardown. The tcp and uds packages
// supply only how to listen and dial.
//
// Connections are one-directional: the dialer writes requests and replies,
// the listener reads them and writes back only ShuttingDown echoes. A
// dialer keeps one connection per (peer, lane), dialed on the first send on
// that lane, with one writer goroutine and one echo reader each. A listener
// runs one reader goroutine per accepted connection. Nothing is started per
// frame.
package streamsock
