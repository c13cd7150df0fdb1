// Package hubconf reads the JSON file of the hub programs, velo-hub and
// `velo hub`: the hub's Config (package hub) at the top level, plus a
// "store" section (which store keeps the registrations) and a "velo"
// section (the hub's own velo node, which probes the registrants).
//
// It imports no store client, so `velo hub`, which must stay light, reads
// the same file as velo-hub and can tell the user that an etcd store
// needs velo-hub instead of ignoring the section.
package hubconf
