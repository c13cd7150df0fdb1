// Package fs keeps peer and service registrations in one JSON file on one
// host, for development and tests. Writers on the host take an exclusive
// lock on a side file (<file>.lock) for each read-modify-write, then write
// a temporary file and rename it over the old one, so readers never see a
// half-written file. The file formats follow the Rust reference, so Go and
// Rust processes on one host can read each other's entries.
package fs
