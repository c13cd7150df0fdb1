// Package hostile is an attacker's toolkit against velo nodes, and the
// cases of issue 20 built on it. Tests (internal/robustness) and the
// `velo bench hostile` harness run the same cases.
//
// A case runs between separate processes. The binary that runs the case
// starts itself twice more as node processes (RunChild): a victim, and a
// legit peer that streams to it or from it. Both are ordinary velo nodes
// over TCP, driven over a control channel (JSON lines on stdin and
// stdout). The attacker lives in the process that runs the case: raw TCP
// connections to the victim's messenger port that write velo frames by
// hand (Frame, Batch), and bare messengers that speak the protocol with
// their own identity but do not follow its rules (rogue.go).
//
// Each case measures, on the victim, the CPU it spent per hostile frame
// (getrusage over the attack, less what the legit streams cost in the
// same time), its CPU after the attack stopped, the growth of its live
// heap, the counters that moved, and whether every legit stream arrived
// whole and in order. Result holds the figures and Result.Failures says
// which bounds of the issue they break.
package hostile
