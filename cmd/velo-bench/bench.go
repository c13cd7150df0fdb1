package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func runBench(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("bench needs a harness name\n%s", usage)
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per figure")
	reps := fs.Int("reps", 3, "repetitions; figures are medians with min and max")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile (every 4 KiB sampled) to this file at the end")
	traceFile := fs.String("trace", "", "write an execution trace (runtime/trace; read it with go tool trace) to this file")
	blockProfile := fs.String("blockprofile", "", "write the time goroutines waited on mutexes (mutex profile) and blocked (block profile) to FILE.mutex and FILE.block at the end")
	var report bench.Report
	var runIt func() error
	switch name {
	case "tx-budget":
		transports := fs.String("transport", "tcp,uds", "comma-separated transports")
		iters := fs.Int("iters", 20000, "round trips per rung and rep")
		header := fs.Int("header", 64, "header bytes")
		payload := fs.Int("payload", 1024, "payload bytes")
		runIt = func() error {
			return bench.TxBudget(bench.TxBudgetConfig{
				Transports: strings.Split(*transports, ","), Iters: *iters, Reps: *reps,
				HeaderLen: *header, PayloadLen: *payload,
			}, &report)
		}
	default:
		if fn, ok := extraHarnesses[name]; ok {
			runIt = fn(fs, &report, reps)
			break
		}
		return fmt.Errorf("unknown harness %q\n%s", name, usage)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, o := range []struct {
		path  string
		start func(io.Writer) error
		stop  func()
	}{
		{*cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{*traceFile, trace.Start, trace.Stop},
	} {
		if o.path == "" {
			continue
		}
		f, err := os.Create(o.path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := o.start(f); err != nil {
			return err
		}
		defer o.stop()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	if *blockProfile != "" {
		runtime.SetMutexProfileFraction(1)
		runtime.SetBlockProfileRate(1)
	}
	if err := runIt(); err != nil {
		return err
	}
	if *memProfile != "" {
		if err := writeProfile("allocs", *memProfile); err != nil {
			return err
		}
	}
	if *blockProfile != "" {
		for _, p := range []string{"mutex", "block"} {
			if err := writeProfile(p, *blockProfile+"."+p); err != nil {
				return err
			}
		}
	}
	if *asJSON {
		return report.WriteJSON(os.Stdout)
	}
	return report.WriteTable(os.Stdout)
}

// extraHarnesses registers harnesses defined in other files of this command.
var extraHarnesses = map[string]func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error{}

// writeProfile writes the named runtime profile of the run to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
