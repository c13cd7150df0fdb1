// Package embedded starts nats-server (with JetStream) and etcd inside the
// current process, on free loopback ports, with their data in a directory
// the caller owns. Tests and `velo-bench demo` use it so that nothing
// needs to be installed.
package embedded
