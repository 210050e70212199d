package queue

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

const zone = "topology.kubernetes.io/zone"

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// node builds a participant: state, zone ("" for no label), since offset
// in seconds, published concurrency and zone max (0: no zone rule), and
// extra labels as key=value.
func node(name string, state claim.State, z string, since, conc, zoneMax int, labels ...string) claim.Participant {
	p := claim.Participant{Name: name, Ready: true, Labels: map[string]string{}}
	if z != "" {
		p.Labels[zone] = z
	}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		p.Labels[k] = v
	}
	p.Claim = claim.Claim{V: 1, State: state, Since: t0.Add(time.Duration(since) * time.Second), Updated: t0,
		Limits: claim.Limits{Concurrency: conc}}
	if zoneMax > 0 {
		p.Claim.Limits.Groups = []claim.GroupLimit{{Label: zone, Max: zoneMax}}
	}
	return p
}

func TestClass(t *testing.T) {
	a := node("a", claim.Waiting, "z1", 0, 3, 1)
	tests := []struct {
		name string
		p    claim.Participant
		same bool
	}{
		{"same limits and zone", node("b", claim.Waiting, "z1", 5, 3, 1), true},
		{"another zone", node("b", claim.Waiting, "z2", 5, 3, 1), false},
		{"no zone label", node("b", claim.Waiting, "", 5, 3, 1), false},
		{"other limits", node("b", claim.Waiting, "z1", 5, 2, 1), false},
		// A label no rule of the class names does not split it: the
		// front counts such members apart (Standing's counts).
		{"a label no rule names", node("b", claim.Waiting, "z1", 5, 3, 1, "rack=r9"), true},
		{"relabelled while waiting: its recorded zone counts", func() claim.Participant {
			p := node("b", claim.Waiting, "z1", 5, 3, 1)
			p.Claim.Groups = map[string]string{zone: "z2"}
			return p
		}(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassOf(a).Equal(ClassOf(tt.p)); got != tt.same {
				t.Errorf("same class = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestSelector(t *testing.T) {
	tests := []struct {
		name string
		p    claim.Participant
		want string
	}{
		{"no group rule", node("a", claim.Waiting, "z1", 0, 2, 0),
			"kured-host.dev/claim=waiting,kured-host.dev/waiting-limits=" + claim.LimitsDigest(claim.Limits{Concurrency: 2})},
		{"zone rule", node("a", claim.Waiting, "z1", 0, 2, 1),
			",topology.kubernetes.io/zone=z1"},
		{"zone rule, no zone label", node("a", claim.Waiting, "", 0, 2, 1),
			",!topology.kubernetes.io/zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClassOf(tt.p).Selector(); !strings.HasSuffix(got, tt.want) {
				t.Errorf("Selector() = %q, want it to end in %q", got, tt.want)
			}
		})
	}
}

func TestWidth(t *testing.T) {
	tests := []struct {
		name   string
		l      claim.Limits
		labels map[string]string
		want   int
	}{
		{"concurrency only", claim.Limits{Concurrency: 10}, nil, 10},
		{"a zone rule", claim.Limits{Concurrency: 10, Groups: []claim.GroupLimit{{Label: zone, Max: 1}}}, map[string]string{zone: "a"}, 1},
		{"a zone rule, no zone label: no domain of it", claim.Limits{Concurrency: 10, Groups: []claim.GroupLimit{{Label: zone, Max: 1}}}, nil, 10},
		{"concurrency the smallest", claim.Limits{Concurrency: 2, Groups: []claim.GroupLimit{{Label: zone, Max: 4}, {Label: "rack", Max: 3}}}, map[string]string{zone: "a", "rack": "r"}, 2},
		{"a rack rule the smallest", claim.Limits{Concurrency: 8, Groups: []claim.GroupLimit{{Label: zone, Max: 4}, {Label: "rack", Max: 3}}}, map[string]string{zone: "a", "rack": "r"}, 3},
		{"nothing published", claim.Limits{}, nil, 1},
	}
	for _, tt := range tests {
		p := claim.Participant{Name: "a", Labels: tt.labels, Claim: claim.Claim{Limits: tt.l}}
		if got := ClassOf(p).Width(tt.l); got != tt.want {
			t.Errorf("%s: Width = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestRoleOf(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   Role
	}{
		{nil, RoleBehind},
		{map[string]string{FrontLabel: "in"}, RoleIn},
		{map[string]string{FrontLabel: "edge"}, RoleEdge},
		{map[string]string{FrontLabel: "somewhere"}, RoleEdge},
	}
	for _, tt := range tests {
		if got := RoleOf(tt.labels); got != tt.want {
			t.Errorf("RoleOf(%v) = %q, want %q", tt.labels, got, tt.want)
		}
	}
}

func TestStanding(t *testing.T) {
	live := func(p claim.Participant) bool { return Live(p, nil) }
	self := node("self", claim.Waiting, "z1", 10, 10, 2) // width 2
	notReady := node("nr", claim.Waiting, "z1", 2, 10, 2)
	notReady.Ready = false
	unreadable := node("bad", claim.Waiting, "z1", 3, 10, 2)
	unreadable.Err = errors.New("garbage")
	tests := []struct {
		name      string
		view      []claim.Participant
		counts    func(claim.Participant) bool
		want      Role
		wantAhead int
	}{
		{"alone", nil, live, RoleIn, 0},
		{"one ahead", []claim.Participant{node("a", claim.Waiting, "z1", 1, 10, 2)}, live, RoleIn, 1},
		{"width ahead: the edge", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 10, 2), node("b", claim.Waiting, "z1", 2, 10, 2)}, live, RoleEdge, 2},
		{"one more ahead: still the edge", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 10, 2), node("b", claim.Waiting, "z1", 2, 10, 2),
			node("c", claim.Waiting, "z1", 3, 10, 2)}, live, RoleEdge, 3},
		{"two more than the width ahead: behind", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 10, 2), node("b", claim.Waiting, "z1", 2, 10, 2),
			node("c", claim.Waiting, "z1", 3, 10, 2), node("d", claim.Waiting, "z1", 4, 10, 2)}, live, RoleBehind, 4},
		{"behind self, other zones, other limits and active claims do not count", []claim.Participant{
			node("later", claim.Waiting, "z1", 11, 10, 2), node("z2", claim.Waiting, "z2", 1, 10, 2),
			node("lim", claim.Waiting, "z1", 1, 9, 2), node("act", claim.Holding, "z1", 1, 10, 2),
			node("ent", claim.Entering, "z1", 1, 10, 2)}, live, RoleIn, 0},
		{"a tie in since goes by name", []claim.Participant{
			node("t", claim.Waiting, "z1", 10, 10, 2), node("a", claim.Waiting, "z1", 10, 10, 2),
			node("b", claim.Waiting, "z1", 10, 10, 2)}, live, RoleEdge, 2},
		{"NotReady, stopped and unreadable members do not count", []claim.Participant{
			notReady, unreadable, node("st", claim.Waiting, "z1", 4, 10, 2, StoppedLabel+"=true"),
			node("a", claim.Waiting, "z1", 5, 10, 2)}, live, RoleIn, 1},
		{"counts leaves out a member blocked in a foreign domain", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 10, 2, "rack=full"), node("b", claim.Waiting, "z1", 2, 10, 2)},
			func(p claim.Participant) bool { return live(p) && p.Labels["rack"] != "full" }, RoleIn, 1},
		{"self in the view does not count itself", []claim.Participant{self}, live, RoleIn, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ahead := Standing(self, tt.view, tt.counts)
			if got != tt.want || ahead != tt.wantAhead {
				t.Errorf("Standing = %q, %d ahead; want %q, %d", got, ahead, tt.want, tt.wantAhead)
			}
		})
	}
}

func TestAhead(t *testing.T) {
	self := node("self", claim.Waiting, "z1", 10, 3, 1)
	notReady := node("nr", claim.Waiting, "z1", 9, 3, 1)
	notReady.Ready = false
	tests := []struct {
		name  string
		found []claim.Participant
		want  []string // nearest first
	}{
		{"none found", nil, nil},
		{"nearest first", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 3, 1), node("c", claim.Waiting, "z1", 9, 3, 1),
			node("b", claim.Waiting, "z1", 5, 3, 1)}, []string{"c", "b", "a"}},
		{"a tie in since: the name decides", []claim.Participant{
			node("a", claim.Waiting, "z1", 10, 3, 1), node("z", claim.Waiting, "z1", 10, 3, 1)}, []string{"a"}},
		{"NotReady and stopped members are passed over", []claim.Participant{
			node("a", claim.Waiting, "z1", 1, 3, 1), notReady,
			node("st", claim.Waiting, "z1", 8, 3, 1, StoppedLabel+"=true")}, []string{"a"}},
		{"behind, other classes and active claims are not ahead", []claim.Participant{
			node("later", claim.Waiting, "z1", 11, 3, 1), node("z2", claim.Waiting, "z2", 9, 3, 1),
			node("act", claim.Entering, "z1", 9, 3, 1), self}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range Ahead(self, tt.found) {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Ahead = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFollow(t *testing.T) {
	self := node("self", claim.Waiting, "z1", 10, 3, 1)
	pred := func(mut func(*claim.Participant)) claim.Participant {
		p := node("p", claim.Waiting, "z1", 5, 3, 1)
		mut(&p)
		return p
	}
	tests := []struct {
		name string
		pred claim.Participant
		gone bool
		want Move
	}{
		{"waiting behind the edge: stay", pred(func(*claim.Participant) {}), false, Stay},
		{"the edge: stay", pred(func(p *claim.Participant) { p.Labels[FrontLabel] = "edge" }), false, Stay},
		{"in: enter", pred(func(p *claim.Participant) { p.Labels[FrontLabel] = "in" }), false, Enter},
		{"NotReady: find the next", pred(func(p *claim.Participant) { p.Ready = false }), false, Find},
		{"stopped: find the next", pred(func(p *claim.Participant) { p.Labels[StoppedLabel] = "true" }), false, Find},
		{"announced: find", pred(func(p *claim.Participant) { p.Claim.State = claim.Entering }), false, Find},
		// The members ahead of it without a front label were passed
		// over by the front (their daemons hang).
		{"announced from the front: enter", pred(func(p *claim.Participant) {
			p.Claim.State, p.Labels[FrontLabel] = claim.Entering, string(RoleIn)
		}), false, Enter},
		{"holding, from the front: enter", pred(func(p *claim.Participant) {
			p.Claim.State, p.Labels[FrontLabel] = claim.Holding, string(RoleIn)
		}), false, Enter},
		{"announced from the edge (a label this version does not write): find", pred(func(p *claim.Participant) {
			p.Claim.State, p.Labels[FrontLabel] = claim.Entering, string(RoleEdge)
		}), false, Find},
		{"claim removed: find", pred(func(p *claim.Participant) { p.Claim = claim.Claim{} }), false, Find},
		{"unreadable: find", pred(func(p *claim.Participant) { p.Err = errors.New("garbage") }), false, Find},
		{"relabelled into another zone: find", pred(func(p *claim.Participant) { p.Labels[zone] = "z2" }), false, Find},
		{"joined again behind: find", pred(func(p *claim.Participant) { p.Claim.Since = t0.Add(20 * time.Second) }), false, Find},
		{"Node deleted: find", pred(func(*claim.Participant) {}), true, Find},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Follow(self, tt.pred, tt.gone); got != tt.want {
				t.Errorf("Follow = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSpanSelector(t *testing.T) {
	since := time.UnixMilli(1_000_000)
	tests := []struct {
		try  int
		want string
		last bool
	}{
		{0, "kured-host.dev/waiting-since<1000001,kured-host.dev/waiting-since>999749", false},
		{1, "kured-host.dev/waiting-since<1000001,kured-host.dev/waiting-since>997999", false},
		{2, "kured-host.dev/waiting-since<1000001,kured-host.dev/waiting-since>969999", false},
		{3, "kured-host.dev/waiting-since<1000001,kured-host.dev/waiting-since>519999", false},
		{4, "kured-host.dev/waiting-since<1000001", true},
		{9, "kured-host.dev/waiting-since<1000001", true},
	}
	for _, tt := range tests {
		got, last := SpanSelector(since, tt.try)
		if got != tt.want || last != tt.last {
			t.Errorf("SpanSelector(try %d) = %q, %v; want %q, %v", tt.try, got, last, tt.want, tt.last)
		}
	}
}
