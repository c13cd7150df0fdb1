// Package rdmatest is an in-process fake of rdma.Backend, for tests only.
//
// A Backend "registers" memory by remembering its range, packs random
// keys into a table shared by the whole process, and runs a GET as a
// copy out of the mapped range. Two nodes in one test process, each with
// its own Backend, can therefore GET from each other the way two UCX
// workers do. Fault hooks fail, park or kill GETs, maps and unmaps, and
// counters report what the code under test asked for.
//
// Nothing here touches the network or pins a page: it must never be used
// outside tests.
package rdmatest
