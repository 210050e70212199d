package status

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/steer"
	"github.com/kured-host/kured-host/internal/golden"
)

const zone = config.ZoneLabel

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

// fx is a Node of a fixture.
type fx struct {
	name, zone    string // zone "" for no label
	notReady      bool
	unschedulable bool
	label, ann    string       // the claim as written; ann from c when empty
	c             *claim.Claim // nil for no claim
	hold          map[string]string
}

func (f fx) node(t *testing.T) corev1.Node {
	t.Helper()
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.name, Labels: map[string]string{"kubernetes.io/hostname": f.name}, Annotations: map[string]string{}}}
	n.Spec.Unschedulable = f.unschedulable
	ready := corev1.ConditionTrue
	if f.notReady {
		ready = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	if f.zone != "" {
		n.Labels[zone] = f.zone
	}
	if f.c != nil && f.ann == "" {
		s, err := f.c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		f.ann = s
		if f.label == "" {
			f.label = string(f.c.State)
		}
	}
	if f.label != "" {
		n.Labels[claim.Label] = f.label
	}
	if f.ann != "" {
		n.Annotations[claim.Annotation] = f.ann
	}
	for k, v := range f.hold {
		if k == steer.HoldLabel {
			n.Labels[k] = v
		} else {
			n.Annotations[k] = v
		}
	}
	return n
}

func limits(concurrency, perZone int) claim.Limits {
	l := claim.Limits{Concurrency: concurrency}
	if perZone > 0 {
		l.Groups = []claim.GroupLimit{{Label: zone, Max: perZone}}
	}
	return l
}

func waiting(since time.Duration, l claim.Limits) *claim.Claim {
	return &claim.Claim{State: claim.Waiting, Since: ago(since), Updated: ago(since), Limits: l}
}

func entering(since, updated time.Duration, l claim.Limits, z string) *claim.Claim {
	c := &claim.Claim{State: claim.Entering, Since: ago(since), Updated: ago(updated), Limits: l}
	if z != "" {
		// The lock records only the labels the node has.
		c.Groups = map[string]string{zone: z}
	}
	return c
}

func holding(since, acquired time.Duration, phase claim.Phase, l claim.Limits, z string) *claim.Claim {
	a := ago(acquired)
	c := &claim.Claim{State: claim.Holding, Since: ago(since), Updated: a, Acquired: &a, Limits: l, BootID: "b00t", Phase: phase, Cordoned: true}
	if z != "" {
		c.Groups = map[string]string{zone: z}
	}
	return c
}

func local(concurrency, perZone int, change func(*config.LockConfig)) Local {
	l := config.Default().Lock
	l.Concurrency = concurrency
	l.Groups = nil
	if perZone > 0 {
		l.Groups = []config.GroupLimit{{Label: zone, Max: perZone}}
	}
	if change != nil {
		change(&l)
	}
	return Local{Lock: l, File: "/etc/kured-host/config.toml", ConcurrencyFrom: "/etc/kured-host/config.d/10-roll.toml:3", GroupsFrom: "/etc/kured-host/config.toml:12"}
}

type fixture struct {
	name  string
	local Local
	nodes []fx
}

func fixtures() []fixture {
	seed := local(3, 1, nil)
	seed.Self = "node-a2"
	defaults := Local{Lock: config.Default().Lock}
	return []fixture{
		{"nobody", local(2, 1, nil), []fx{{name: "node-a1", zone: "zone-a"}, {name: "node-b1", zone: "zone-b"}}},
		{"seed", seed, []fx{
			{name: "node-a1", zone: "zone-a", unschedulable: true, c: holding(25*time.Minute, 3*time.Minute+10*time.Second, claim.PhaseDraining, limits(3, 1), "zone-a")},
			{name: "node-b1", zone: "zone-b", notReady: true, unschedulable: true, c: holding(24*time.Minute, 70*time.Second, claim.PhaseRebooting, limits(3, 1), "zone-b")},
			{name: "node-a2", zone: "zone-a", c: waiting(20*time.Minute, limits(3, 1))},
			{name: "node-c1", zone: "zone-c", c: waiting(19*time.Minute, limits(3, 1))},
			{name: "node-b2", zone: "zone-b", notReady: true, c: waiting(18*time.Minute, limits(3, 1))},
			{name: "node-x1", c: waiting(5*time.Minute, limits(3, 1))},
			{name: "node-c2", zone: "zone-c"},
			{name: "node-c3", zone: "zone-c"},
		}},
		{"unreadable", local(2, 0, nil), []fx{
			{name: "node-1", c: holding(10*time.Minute, 9*time.Minute, claim.PhaseCordoned, limits(2, 0), "")},
			{name: "node-2", label: "holding", ann: `{"v":1,"limits":`},
			{name: "node-3", c: waiting(8*time.Minute, limits(2, 0))},
			{name: "node-4", label: "waiting", ann: `{"v":7}`},
			{name: "node-5", label: "paused", ann: `{}`},
		}},
		{"alarms", local(3, 0, nil), []fx{
			{name: "stuck-holder", notReady: true, c: holding(3*time.Hour, 2*time.Hour+5*time.Minute, claim.PhaseRebooting, limits(3, 0), "")},
			{name: "stuck-entering", c: entering(30*time.Minute, 15*time.Minute, limits(3, 0), "")},
			{name: "next", c: waiting(20*time.Minute, limits(3, 0))},
			{name: "after", c: waiting(10*time.Minute, limits(3, 0))},
		}},
		{"mixed-limits", local(3, 2, func(l *config.LockConfig) { l.TTL = config.Duration(30 * time.Minute) }), []fx{
			{name: "old", zone: "zone-a", c: holding(50*time.Minute, 45*time.Minute, claim.PhaseRebooted, limits(3, 2), "zone-a")},
			{name: "moved", zone: "zone-b", c: holding(20*time.Minute, 12*time.Minute, claim.PhaseDrained, limits(2, 2), "zone-a")},
			{name: "strict", zone: "zone-b", c: waiting(15*time.Minute, limits(1, 1))},
			{name: "late", zone: "zone-a", c: waiting(2*time.Minute, limits(3, 2))},
		}},
		{"forged", local(3, 1, nil), forged()},
		{"cluster-settings", Local{Lock: func() config.LockConfig { l := config.Default().Lock; l.Concurrency = 3; return l }(),
			ConcurrencyFrom: config.ClusterSource + ":2", GroupsFrom: config.ClusterSource + ":4"}, []fx{
			{name: "s-1", zone: "zone-a", c: holding(10*time.Minute, 8*time.Minute, claim.PhaseDraining, limits(3, 1), "zone-a")},
			{name: "s-2", zone: "zone-b", c: waiting(9*time.Minute, limits(3, 1))},
		}},
		{"orders", local(2, 0, nil), []fx{
			{name: "n-1", unschedulable: true, c: holding(10*time.Minute, 8*time.Minute, claim.PhaseRebooting, limits(2, 0), "")},
			{name: "n-2", c: waiting(9*time.Minute, limits(2, 0))},
			{name: "gpu-1", hold: map[string]string{steer.HoldLabel: "true", steer.HoldReason: "driver freeze", steer.HoldBy: "alice", steer.HoldSince: "2026-11-30T08:00:00Z"}},
			{name: "gpu-2", hold: map[string]string{steer.HoldLabel: "\x1b[2Jowned"}},
		}},
		{"admin-defaults", defaults, []fx{
			{name: "w-1", zone: "eu-1a", c: holding(40*time.Minute, 35*time.Minute, claim.PhaseAcquired, limits(2, 1), "eu-1a")},
			{name: "w-2", zone: "eu-1b", c: entering(30*time.Second, time.Second, limits(2, 1), "eu-1b")},
			{name: "w-3", zone: "eu-1a", c: waiting(20*time.Second, limits(2, 1))},
			{name: "w-4", zone: "eu-1c", c: waiting(10*time.Second, limits(2, 1))},
		}},
	}
}

// forged are claims as a compromised node (or a broken clock) might write
// them, with the default tolerance of 5 minutes.
func forged() []fx {
	future := holding(10*time.Minute, -time.Hour, claim.PhaseRebooting, limits(3, 1), "zone-a")
	future.Updated = *future.Acquired
	escape := holding(5*time.Minute, 4*time.Minute, "\x1b]0;owned\x07\x1b[2J", limits(3, 1), "zone-c")
	zoneless := waiting(8*time.Minute, limits(3, 1))
	zoneless.Groups = map[string]string{zone: "zone-x"} // a waiting claim's groups count for no one
	later := waiting(-time.Hour, limits(3, 1))
	return []fx{
		{name: "future-holder", zone: "zone-a", c: future},
		{name: "moved", zone: "zone-b", c: holding(20*time.Minute, 12*time.Minute, claim.PhaseDrained, limits(3, 1), "zone-a")},
		{name: "escape", zone: "zone-c", c: escape},
		{name: "waiter", zone: "zone-c", c: zoneless},
		{name: "future-waiter", zone: "zone-b", c: later},
	}
}

func (f fixture) report(t *testing.T) Report {
	var nodes []corev1.Node
	for _, n := range f.nodes {
		nodes = append(nodes, n.node(t))
	}
	r := Snapshot(nodes, f.local, now)
	if f.name == "orders" {
		r.SetPause(map[string]string{steer.KeyPaused: "kernel CVE triage", steer.KeyPausedBy: "bob", steer.KeyPausedSince: "2026-12-01T09:00:00Z"})
	}
	return r
}

// golden compares got with testdata/name, or rewrites it with -update.

// TestGolden renders each fixture as the table and as JSON.
func TestGolden(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			r := f.report(t)
			var table, js bytes.Buffer
			if err := Render(&table, r); err != nil {
				t.Fatal(err)
			}
			if err := JSON(&js, r); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, f.name+".txt", table.Bytes())
			golden.Check(t, f.name+".json", js.Bytes())
		})
	}
}

// TestJSONRoundTrip: the JSON document decodes into the same Report, so
// that nothing a script might want is left out of it.
func TestJSONRoundTrip(t *testing.T) {
	for _, f := range fixtures() {
		t.Run(f.name, func(t *testing.T) {
			r := f.report(t)
			var b bytes.Buffer
			if err := JSON(&b, r); err != nil {
				t.Fatal(err)
			}
			var back Report
			dec := json.NewDecoder(&b)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, r) {
				t.Errorf("round trip differs:\n%+v\n%+v", back, r)
			}
			if back.Schema != SchemaVersion {
				t.Errorf("schema %d", back.Schema)
			}
		})
	}
}

func find(r Report, name string) Node {
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	return Node{}
}

// TestUnreadableCountsAsHolding: a claim that cannot be read takes a slot
// (with concurrency 1), keeps the next node out, and is called out; an
// unreadable waiting claim is ignored by the queue and called out too.
func TestUnreadableCountsAsHolding(t *testing.T) {
	var f fixture
	for _, x := range fixtures() {
		if x.name == "unreadable" {
			f = x
		}
	}
	r := f.report(t)
	for _, name := range []string{"node-2", "node-5"} {
		n := find(r, name)
		if n.State != StateUnreadable || !n.Active || n.Error == "" {
			t.Errorf("%s: %+v, want unreadable and active", name, n)
		}
	}
	if n := find(r, "node-4"); n.State != StateUnreadable || n.Active || n.Queue != 0 {
		t.Errorf("unreadable waiting claim: %+v, want unreadable, not active, not in the queue", n)
	}
	if s := r.Summary; s.Active != 3 || s.Holding != 1 || s.Unreadable != 2 || s.Waiting != 1 || s.Max != 1 {
		t.Errorf("summary %+v", s)
	}
	if l := r.Limits[0]; l.Max != 1 || l.Kind != FromNode || l.Node != "node-2" {
		t.Errorf("global limit %+v, want 1 from the unreadable node-2", l)
	}
	if n := find(r, "node-3"); !strings.Contains(n.BlockedBy, "the cluster is full") {
		t.Errorf("node-3 blocked by %q, want the cluster", n.BlockedBy)
	}
	var out bytes.Buffer
	if err := Render(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"! node-2: claim cannot be read",
		"it counts as holding a slot until it is fixed or removed",
		"! node-4: waiting claim cannot be read",
		"holding 3/1 (2 unreadable)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestAge(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {0, "0s"}, {1500 * time.Millisecond, "1s"}, {119 * time.Second, "119s"},
		{150 * time.Second, "2m30s"}, {5 * time.Minute, "5m"}, {25 * time.Minute, "25m"}, {179 * time.Minute, "179m"},
		{3*time.Hour + 5*time.Minute, "3h5m"}, {9*time.Hour + 5*time.Minute, "9h"}, {50 * time.Hour, "2d2h"}, {9 * 24 * time.Hour, "9d"},
	}
	for _, tt := range tests {
		if got := age(tt.d); got != tt.want {
			t.Errorf("age(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestForgedClaims: claims that cannot be believed are shown as
// unreadable, with the reason, and count as holding a slot (a waiting one
// is left out of the queue); a readable claim's strings reach the
// terminal with their control characters escaped.
func TestForgedClaims(t *testing.T) {
	r := fixture{"forged", local(3, 1, nil), forged()}.report(t)
	for _, tc := range []struct {
		name   string
		active bool
		says   string
	}{
		{"future-holder", true, "acquired is 1h0m0s ahead of the API server's clock, more than the clock tolerance of 5m0s: this host's or that node's clock is wrong, or the claim is forged"},
		{"moved", true, `it recorded group topology.kubernetes.io/zone="zone-a" but the node's label is "zone-b": relabelled while holding, or forged`},
		{"future-waiter", false, "since is 1h0m0s and updated is 1h0m0s ahead"},
	} {
		n := find(r, tc.name)
		if n.State != StateUnreadable || n.Active != tc.active || !strings.Contains(n.Error, tc.says) || n.Queue != 0 {
			t.Errorf("%s: %+v, want unreadable, active %v, saying %q", tc.name, n, tc.active, tc.says)
		}
	}
	if n := find(r, "waiter"); n.State != StateWaiting {
		t.Errorf("a waiting claim with a recorded group its node lacks: %+v, want waiting", n)
	}
	if s := r.Summary; s.Unreadable != 2 || s.Holding != 1 || s.Max != 1 || s.Alarms != 3 {
		t.Errorf("summary %+v", s)
	}
	var out bytes.Buffer
	if err := Render(&out, r); err != nil {
		t.Fatal(err)
	}
	for i, c := range out.Bytes() {
		if (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("control character %#x at %d in the table:\n%s", c, i, out.String())
		}
	}
	if want := `"\x1b]0;owned\a\x1b[2J"`; !strings.Contains(out.String(), want) {
		t.Errorf("the forged phase is not shown quoted as %s:\n%s", want, out.String())
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, field, line string }{
		{"zone-a", "zone-a", "zone-a"},
		{"two words", "two words", "two words"},
		{"é ü 東京", "é ü 東京", "é ü 東京"},
		{"\x1b[31mred", `"\x1b[31mred"`, `\x1b[31mred`},
		{"a\tb\nc", `"a\tb\nc"`, `a\tb\nc`},
		{"\u202eevil", `"\u202eevil"`, `\u202eevil`},
		{"\u009b2J", `"\u009b2J"`, `\u009b2J`},
		{"bad\xffbyte", `"bad\xffbyte"`, `bad\xffbyte`},
	} {
		if got := field(tc.in); got != tc.field {
			t.Errorf("field(%q) = %s, want %s", tc.in, got, tc.field)
		}
		if got := host.Escape(tc.in); got != tc.line {
			t.Errorf("host.Escape(%q) = %s, want %s", tc.in, got, tc.line)
		}
	}
}
