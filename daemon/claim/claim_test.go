package claim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/labels"
)

func TestParse(t *testing.T) {
	good := `{"v":1,"state":"holding","since":"2026-11-29T10:00:00Z","updated":"2026-11-29T10:01:00Z","limits":{"concurrency":2,"groups":[{"label":"topology.kubernetes.io/zone","max":1}]},"groups":{"topology.kubernetes.io/zone":"a"},"bootID":"b1","phase":"draining","wasUnschedulable":false}`
	tests := []struct {
		name        string
		label, ann  string
		state       State
		concurrency int
		phase       Phase
		bad         bool
	}{
		{"holding", "holding", good, Holding, 2, PhaseDraining, false},
		{"label and annotation disagree (an edit of the label alone)", "entering", good, Entering, 1, PhaseUnknown, true},
		{"no state in the annotation: the label's", "entering", strings.Replace(good, `"state":"holding",`, "", 1), Entering, 2, PhaseDraining, false},
		{"unknown label value", "rebooting", good, Holding, 1, PhaseUnknown, true},
		{"empty label", "", good, Holding, 1, PhaseUnknown, true},
		{"broken JSON while holding", "holding", `{"v":1,`, Holding, 1, PhaseUnknown, true},
		{"broken JSON while waiting", "waiting", `nope`, Waiting, 1, "", true},
		{"newer version", "holding", `{"v":2,"limits":{"concurrency":5}}`, Holding, 1, PhaseUnknown, true},
		{"zero concurrency", "entering", `{"v":1,"limits":{"concurrency":0}}`, Entering, 1, PhaseUnknown, true},
		{"bad group", "holding", `{"v":1,"limits":{"concurrency":3,"groups":[{"label":"","max":1}]}}`, Holding, 1, PhaseUnknown, true},
		{"wrong types", "holding", `{"v":"1","limits":"x"}`, Holding, 1, PhaseUnknown, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.label, tt.ann)
			if (err != nil) != tt.bad || (err != nil && !errors.Is(err, ErrUnparsable)) {
				t.Fatalf("err = %v, want unparsable %v", err, tt.bad)
			}
			if c.State != tt.state || c.Limits.Concurrency != tt.concurrency || c.Phase != tt.phase {
				t.Errorf("got state %q concurrency %d phase %q, want %q %d %q", c.State, c.Limits.Concurrency, c.Phase, tt.state, tt.concurrency, tt.phase)
			}
		})
	}
}

// TestParseBounds: a claim may publish up to MaxGroupRules group rules
// and record as many values; more, a rule label that is not a label key
// or a value that no label could have, and it cannot be read. The
// message says which bound, and quotes no more than a clip of what broke
// it: it reaches Events.
func TestParseBounds(t *testing.T) {
	rules := func(n int) []GroupLimit {
		gs := make([]GroupLimit, n)
		for i := range gs {
			gs[i] = GroupLimit{fmt.Sprintf("example.com/rule-%d", i), 1}
		}
		return gs
	}
	values := func(n int, v string) map[string]string {
		vs := map[string]string{}
		for _, g := range rules(n) {
			vs[g.Label] = v
		}
		return vs
	}
	long := strings.Repeat("x", 100_000)
	tests := []struct {
		name   string
		limits []GroupLimit
		groups map[string]string
		want   string // in the error; "" parses
	}{
		{"16 rules and 16 values", rules(16), values(16, "a"), ""},
		{"17 rules", rules(17), values(16, "a"), "17 group rules in the annotation, more than the 16"},
		{"17 recorded values", rules(16), values(17, "a"), "17 recorded group values in the annotation, more than the 16"},
		{"5,000 rules", rules(5000), nil, "5000 group rules"},
		{"a label ruled twice: the stricter max counts", []GroupLimit{{"zone", 2}, {"zone", 1}}, nil, ""},
		{"a value of 63 characters", rules(1), values(1, strings.Repeat("v", 63)), ""},
		{"an empty value", rules(1), values(1, ""), ""},
		{"a value of 64 characters", rules(1), values(1, strings.Repeat("v", 64)), "is not a label value: must be no more than 63"},
		{"a value no label could have", rules(1), values(1, "a b"), "is not a label value"},
		{"a value of 100,000 characters", rules(1), values(1, long), `"xxxx`},
		{"a rule label that is not a label key", []GroupLimit{{"not a label", 1}}, nil, `group rule label "not a label" in the annotation is not a label key`},
		{"a rule label of three parts", []GroupLimit{{"a/b/c", 1}}, nil, "is not a label key"},
		{"a rule label of 100,000 characters", []GroupLimit{{long, 1}}, nil, "(100000 bytes) in the annotation is not a label key"},
		{"an empty rule label", []GroupLimit{{"", 1}}, nil, "is not a label key"},
		{"a recorded label that is not a label key", rules(1), map[string]string{"not a label": "a"}, `recorded group "not a label" in the annotation is not a label key`},
		{"a max below 1", []GroupLimit{{"zone", 0}}, nil, `group rule "zone" max 0`},
	}
	for _, tt := range tests {
		for _, state := range []State{Waiting, Entering, Holding} {
			t.Run(tt.name+"/"+string(state), func(t *testing.T) {
				ann, err := Claim{State: state, Limits: Limits{Concurrency: 3, Groups: tt.limits}, Groups: tt.groups}.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				c, err := Parse(string(state), ann)
				if tt.want == "" {
					if err != nil || len(c.Limits.Groups) != len(tt.limits) {
						t.Fatalf("err = %v with %d rules, want the claim read", err, len(c.Limits.Groups))
					}
					return
				}
				if !errors.Is(err, ErrUnparsable) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %.300v, want unparsable with %q", err, tt.want)
				}
				if n := len(err.Error()); n > 1000 {
					t.Errorf("a message of %d bytes", n)
				}
				if c.State != state || c.Limits.Concurrency != 1 || len(c.Limits.Groups) != 0 || (state.Active() && c.Phase != PhaseUnknown) {
					t.Errorf("not fail safe: state %s, limits %+v, phase %q", c.State, c.Limits, c.Phase)
				}
			})
		}
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	c := Claim{State: Holding, Since: at, Updated: at, Limits: Limits{Concurrency: 2, Groups: []GroupLimit{{"z", 1}}},
		Groups: map[string]string{"z": "a"}, BootID: "b", Phase: PhaseRebooting, ReleaseAt: &at}
	s, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(string(Holding), s)
	if err != nil {
		t.Fatal(err)
	}
	c.V = Version
	if g, _ := got.Marshal(); g != s {
		t.Errorf("round trip changed the claim:\n%s\n%s", g, s)
	}
}

// FuzzParse: no input panics, and whatever is returned for an active label
// either parsed or fails safe (holding-or-entering with concurrency 1).
func FuzzParse(f *testing.F) {
	f.Add("holding", `{"v":1,"limits":{"concurrency":2}}`)
	f.Add("waiting", `{}`)
	f.Add("entering", `{"v":1,"limits":{"concurrency":1,"groups":[{"label":"z","max":1}]},"groups":{"z":"a"}}`)
	f.Add("x", "")
	f.Fuzz(func(t *testing.T, label, ann string) {
		c, err := Parse(label, ann)
		if c.Limits.Concurrency < 1 {
			t.Fatalf("concurrency %d returned", c.Limits.Concurrency)
		}
		if err != nil && label != string(Waiting) && !c.State.Active() {
			t.Fatalf("an unreadable claim with label %q came back as %q", label, c.State)
		}
		if err != nil && c.State.Active() && c.Limits.Concurrency != 1 {
			t.Fatalf("an unreadable active claim publishes concurrency %d", c.Limits.Concurrency)
		}
	})
}

// TestAheadSelector: the selector an API server parses selects the
// waiting claims at or before a place, by the label value SinceValue
// writes, and no later one.
func TestAheadSelector(t *testing.T) {
	me := time.Date(2026, 12, 2, 3, 0, 0, 123_000_000, time.UTC)
	sel, err := labels.Parse(AheadSelector(me))
	if err != nil {
		t.Fatalf("parse %q: %v", AheadSelector(me), err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"level", map[string]string{SinceLabel: SinceValue(me)}, true},
		{"a millisecond ahead", map[string]string{SinceLabel: SinceValue(me.Add(-time.Millisecond))}, true},
		{"an hour ahead", map[string]string{SinceLabel: SinceValue(me.Add(-time.Hour))}, true},
		{"a millisecond behind", map[string]string{SinceLabel: SinceValue(me.Add(time.Millisecond))}, false},
		{"without the label", map[string]string{Label: string(Waiting)}, false},
		{"not a number", map[string]string{SinceLabel: "soon"}, false},
	} {
		if got := sel.Matches(labels.Set(tc.labels)); got != tc.want {
			t.Errorf("%s: selected %v, want %v", tc.name, got, tc.want)
		}
	}
}

// SetCordon's fragment, applied as the API server applies a merge patch,
// makes or undoes the cordon and its mark together and leaves the rest of
// the patch and of the Node alone.
func TestSetCordon(t *testing.T) {
	const node = `{"metadata":{"annotations":{"other":"kept"}},"spec":{"podCIDR":"10.0.0.0/24"}}`
	for _, tc := range []struct {
		name  string
		on    bool
		patch map[string]any
		want  string
	}{
		{"cordon", true, map[string]any{},
			`{"metadata":{"annotations":{"other":"kept","` + CordonAnnotation + `":"true"}},"spec":{"podCIDR":"10.0.0.0/24","unschedulable":true}}`},
		{"uncordon", false, map[string]any{},
			`{"metadata":{"annotations":{"other":"kept"}},"spec":{"podCIDR":"10.0.0.0/24"}}`},
		{"cordon within a claim write", true,
			map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: "{}"}}},
			`{"metadata":{"annotations":{"other":"kept","` + Annotation + `":"{}","` + CordonAnnotation + `":"true"}},"spec":{"podCIDR":"10.0.0.0/24","unschedulable":true}}`},
	} {
		start := node
		if !tc.on {
			start = `{"metadata":{"annotations":{"other":"kept","` + CordonAnnotation + `":"true"}},"spec":{"podCIDR":"10.0.0.0/24","unschedulable":true}}`
		}
		SetCordon(tc.patch, tc.on)
		p, err := json.Marshal(tc.patch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jsonpatch.MergePatch([]byte(start), p)
		if err != nil {
			t.Fatalf("%s: apply %s: %v", tc.name, p, err)
		}
		if !jsonpatch.Equal(got, []byte(tc.want)) {
			t.Errorf("%s: patched node %s, want %s", tc.name, got, tc.want)
		}
	}
}
