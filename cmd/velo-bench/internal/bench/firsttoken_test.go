package bench

import (
	"testing"
	"time"
)

// TestFirstTokenTiny runs every arm on a few streams with each setup: the
// token must arrive intact on a mux stream (the harness fails otherwise),
// every arm must report its quantiles, the linger arms their differences
// to auto, and the plain window must hold the token for about its length
// (a lower bound only: a timer can fire late, never early).
func TestFirstTokenTiny(t *testing.T) {
	for _, setup := range []string{"ticket", "attach"} {
		t.Run(setup, func(t *testing.T) {
			cfg := FirstTokenConfig{Arms: FirstTokenArms, Setup: setup, Streams: 20,
				Linger: time.Millisecond, Gap: 200 * time.Microsecond, Reps: 2, Timeout: time.Minute}
			var r Report
			if err := FirstToken(cfg, &r); err != nil {
				t.Fatal(err)
			}
			find := func(arm, metric string) (Figure, bool) {
				for _, f := range r.Figures {
					if f.Arm == arm && f.Metric == metric {
						return f, len(f.Samples) == cfg.Reps
					}
				}
				return Figure{}, false
			}
			for _, arm := range FirstTokenArms {
				for _, m := range []string{"first_token_p50_us", "first_token_p99_us", "open_to_first_p50_us"} {
					if _, ok := find(arm, m); !ok {
						t.Errorf("arm %s: no %s over %d reps", arm, m, cfg.Reps)
					}
				}
			}
			for _, arm := range []string{"linger_minus_auto", "linger-complete_minus_auto"} {
				if _, ok := find(arm, "first_token_p50_diff_us"); !ok {
					t.Errorf("no %s difference", arm)
				}
			}
			if f, _ := find("linger", "first_token_p50_us"); f.Min() < 0.9*float64(cfg.Linger.Microseconds()) {
				t.Errorf("linger arm: first token p50 %.0f µs, shorter than the %v window", f.Min(), cfg.Linger)
			}
		})
	}
}

func TestFirstTokenValidate(t *testing.T) {
	good := FirstTokenConfig{Arms: []string{"auto"}, Setup: "ticket", Streams: 1, Linger: time.Millisecond, Reps: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*FirstTokenConfig){
		func(c *FirstTokenConfig) { c.Arms = nil },
		func(c *FirstTokenConfig) { c.Arms = []string{"manual"} },
		func(c *FirstTokenConfig) { c.Setup = "prebind" },
		func(c *FirstTokenConfig) { c.Streams = 0 },
		func(c *FirstTokenConfig) { c.Linger = 0 },
		func(c *FirstTokenConfig) { c.Gap = -time.Millisecond },
	} {
		c := good
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
