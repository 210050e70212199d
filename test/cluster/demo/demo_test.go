package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestDemo runs the scenarios at the fast pace, as `make demo` does, and
// checks their summaries: every node rebooted exactly once, the limits
// reached and never passed, and no violation found by the auditor; in
// the steering one, the pause and the hold in the view, no slot taken
// while paused, and the held node last.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"--fast", "--no-tty"}, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	seed, zones, ok := strings.Cut(got, `Summary of "zones"`)
	if !ok {
		t.Fatal("no summary of the zones scenario")
	}
	zones, steer, ok := strings.Cut(zones, `Summary of "steer"`)
	if !ok {
		t.Fatal("no summary of the steer scenario")
	}
	for _, tc := range []struct {
		part, want string
	}{
		{seed, `rebooted exactly once: +8/8 nodes`},
		{seed, `most nodes holding a slot: +2 \(limit 2\)`},
		{seed, `auditor: +no violation`},
		{zones, `rebooted exactly once: +6/6 nodes`},
		{zones, `most nodes holding a slot: +2 \(limit 2\)`},
		{zones, `most in one zone at once: +1 \(limit 1\)`},
		{zones, `auditor: +no violation`},
		{got, `\$ kured-host pause --reason demo: a change freeze\n\s+paused: since `},
		{got, `waiting #1 \(paused: keeps its place\)`},
		{got, `held: firmware check`},
		{steer, `rebooted exactly once: +6/6 nodes`},
		{steer, `slots taken while paused: +0 `},
		{steer, `the held node went last: +true`},
		{steer, `auditor: +no violation`},
		{seed, `aks-nodepool1-14327021-vmss000007: \{"v":1,"state":"holding".*"phase":"rebooting"`},
	} {
		if !regexp.MustCompile(tc.want).MatchString(tc.part) {
			t.Errorf("output lacks %q", tc.want)
		}
	}
	if strings.Contains(got, "PROBLEMS") {
		t.Error("the auditor found problems")
	}
}
