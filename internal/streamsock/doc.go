// Package streamsock is the messenger transport over stream sockets that
// TCP and UDS share: peers, lanes, the admission gate, the coalescing writer,
// the frame reader, the drain echo and teardown. The tcp and uds packages
// supply only how to listen and dial.
//
// Connections are one-directional: the dialer writes requests and replies,
// the listener reads them and writes back only ShuttingDown echoes, and a
// goodbye when it shuts down. A dialer keeps one connection per (peer,
// lane), dialed on the first send on that lane, with one writer goroutine
// and one echo reader each; a dialed connection that ends without a goodbye
// is reported to the node as a lost peer. A listener runs one reader
// goroutine per accepted connection, with a limit on how many are open and
// on how long a frame may stay half-received. Nothing is started per frame.
package streamsock
