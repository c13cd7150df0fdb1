// Package fs keeps peer and service registrations in one JSON file on one
// host, for development and tests. Writers on the host take an exclusive
// lock on a side file (<file>.lock) for each read-modify-write, then write
// a temporary file and rename it over the old one, so readers never see a
// half-written file. The file formats follow the Rust reference, so Go and
// Rust processes on one host can read each other's entries.
//
// Service entries have liveness, which the reference's do not: before it
// writes an entry, the registrant takes an exclusive flock on a file of
// its own, <file>.live/<id>-<service>.lock, and holds it while the entry
// lives. The kernel drops the lock when the process ends, however it ends
// (a SIGKILL included). A reader that can take an entry's lock knows its
// process is gone: it leaves the entry out and removes it from the file.
// An entry with no lock file (one the reference wrote) is listed as before.
// Peer entries have no liveness: a caller that dials a dead one fails to
// connect.
package fs
