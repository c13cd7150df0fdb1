// Package msgerr is the messenger's error vocabulary: codes, *Error,
// *RemoteError and the messenger's own sentinels with the codes and
// reasons they carry across the wire.
//
// Its public home is the root package velo, which re-exports every name an
// application uses (velo.Code, velo.Error, velo.NotFound, ...) with their
// documentation; package messenger re-exports the sentinels. Keeping the
// definitions here lets messenger and its sibling packages (rendezvous,
// events, streaming) share them without widening messenger's API.
package msgerr
