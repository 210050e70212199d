package claim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Participant is a node that takes part, as one snapshot shows it.
type Participant struct {
	Name   string
	Labels map[string]string // the Node's current labels
	Ready  bool
	Claim  Claim
	// Err says why the claim could not be read. Such a claim counts as
	// holding when its label is active or unknown, and is ignored when its
	// label says waiting.
	Err error
}

// active reports whether p takes a unit of capacity. No clock enters this
// unless the operator turned the TTL on: then a holder whose slot is older
// than ttl is counted out (a readable claim only).
func (p Participant) active(now time.Time, ttl time.Duration) bool {
	if !p.Claim.State.Active() {
		return false
	}
	return !(ttl > 0 && p.Err == nil && p.Claim.State == Holding && p.Claim.Acquired != nil && now.Sub(*p.Claim.Acquired) > ttl)
}

// values are the values of label under which p counts: the one recorded in
// its claim (frozen when it announced) and the node's current one when it
// differs.
func (p Participant) values(label string) []string {
	var vs []string
	if v, ok := p.Claim.Groups[label]; ok {
		vs = append(vs, v)
	}
	if v, ok := p.Labels[label]; ok && !slices.Contains(vs, v) {
		vs = append(vs, v)
	}
	return vs
}

// precedes is the queue order: earlier `since` first, then the name.
func precedes(a, b Participant) bool {
	if !a.Claim.Since.Equal(b.Claim.Since) {
		return a.Claim.Since.Before(b.Claim.Since)
	}
	return a.Name < b.Name
}

func byQueueOrder(a, b Participant) int {
	return cmp.Or(a.Claim.Since.Compare(b.Claim.Since), strings.Compare(a.Name, b.Name))
}

// domain is where a limit applies: the whole cluster (label "") or the nodes
// sharing a value of a group label.
type domain struct{ label, value string }

func (d domain) String() string {
	if d.label == "" {
		return "the cluster"
	}
	return d.label + "=" + d.value
}

func (d domain) contains(p *Participant) bool {
	if d.label == "" {
		return true
	}
	if v, ok := p.Claim.Groups[d.label]; ok && v == d.value {
		return true
	}
	v, ok := p.Labels[d.label]
	return ok && v == d.value // one of p.values(d.label), without the slice
}

// limit is the smallest limit any of ls sets for d; false if none sets one.
func (d domain) limit(ls []Limits) (int, bool) {
	lim, ok := 0, false
	for _, l := range ls {
		lim, ok = rules{Limits: l}.bind(d, lim, ok)
	}
	return lim, ok
}

// rules are one claim's limits, ready to be asked for the limit they set
// in a domain as often as an evaluation needs. A claim that parses has at
// most MaxGroupRules group rules, few enough to scan; a longer list (a
// claim built by other means) is indexed once, so that no evaluation
// walks it for each domain: the cost of a claim to its readers stays
// linear in its rules.
type rules struct {
	Limits
	byLabel map[string]int // the smallest max for each label; nil: scan
}

func indexed(l Limits) rules {
	r := rules{Limits: l}
	if len(l.Groups) > MaxGroupRules {
		r.byLabel = make(map[string]int, len(l.Groups))
		for _, g := range l.Groups {
			if v, ok := r.byLabel[g.Label]; !ok || g.Max < v {
				r.byLabel[g.Label] = g.Max
			}
		}
	}
	return r
}

// bind is the smaller of lim (ok: set) and the limit r sets in d, if it
// sets one (a label ruled twice: the stricter max).
func (r rules) bind(d domain, lim int, ok bool) (int, bool) {
	v, has := r.Concurrency, d.label == ""
	switch {
	case has:
	case r.byLabel != nil:
		v, has = r.byLabel[d.label]
	default:
		for _, g := range r.Groups {
			if g.Label == d.label && (!has || g.Max < v) {
				v, has = g.Max, true
			}
		}
	}
	if has && (!ok || v < lim) {
		return v, true
	}
	return lim, ok
}

// claimed is what the waiting claims that can be read impose: their
// limits bind too (a node of a stricter configuration in the queue makes
// every node obey its limit, so that a roll-out of a configuration change
// never lets more nodes down than the strictest limit of any node taking
// part), each in the domains it is in. Computed once per snapshot: a long
// queue is read often.
type claimed struct {
	limits map[domain]int
}

func claimants(snap []Participant, now time.Time, ttl time.Duration) claimed {
	c := claimed{limits: map[domain]int{}}
	set := func(d domain, v int) {
		if cur, ok := c.limits[d]; !ok || v < cur {
			c.limits[d] = v
		}
	}
	for _, p := range snap {
		if p.active(now, ttl) || !WaitingLimitsBind(p) {
			continue
		}
		set(domain{}, p.Claim.Limits.Concurrency)
		for _, g := range p.Claim.Limits.Groups {
			for _, v := range p.values(g.Label) {
				set(domain{g.Label, v}, g.Max)
			}
		}
	}
	return c
}

// WaitingLimitsBind reports whether p is a waiting claimant whose limits
// bind every node: a claim that parses, or one that is not believed
// (Plausible), whose fail-safe content binds concurrency 1, so that
// distrusting a claim never makes a node less strict than believing it
// would. A waiting claim that cannot be read publishes nothing readable.
func WaitingLimitsBind(p Participant) bool {
	return p.Claim.State == Waiting && (p.Err == nil || errors.Is(p.Err, ErrImplausible))
}

// bind is the smaller of lim (ok: set) and the claimants' limit in d.
func (c claimed) bind(d domain, lim int, ok bool) (int, bool) {
	if v, has := c.limits[d]; has && (!ok || v < lim) {
		return v, true
	}
	return lim, ok
}

// labelSet is a set of group labels, and the same in order.
type labelSet struct {
	in     map[string]struct{}
	sorted []string
}

// ruleLabels is every group label that a rule of snap's claims or of
// more names. One set serves a whole evaluation: a node's domains under
// a label that no limit counting there names have no limit, so they
// never block, fill or bind, and listing them changes no outcome and no
// message.
func ruleLabels(snap []Participant, more ...Limits) labelSet {
	s := labelSet{in: map[string]struct{}{}}
	add := func(l Limits) {
		for _, g := range l.Groups {
			if _, ok := s.in[g.Label]; !ok {
				s.in[g.Label] = struct{}{}
				s.sorted = append(s.sorted, g.Label)
			}
		}
	}
	for i := range snap {
		add(snap[i].Claim.Limits)
	}
	for _, l := range more {
		add(l)
	}
	slices.Sort(s.sorted)
	return s
}

// domainsOf lists the domains p is in under the labels: the cluster
// first, then by label, in the order of the labels' names, each value as
// values lists them. When p has fewer labels and recorded values than
// there are labels, it looks up p's, so that a long list of labels costs
// a node with a few nothing.
func domainsOf(p Participant, labels labelSet) []domain {
	named := labels.sorted
	if own := len(p.Labels) + len(p.Claim.Groups); own < len(named) {
		named = make([]string, 0, own)
		for _, m := range []map[string]string{p.Claim.Groups, p.Labels} {
			for k := range m {
				if _, ok := labels.in[k]; ok {
					named = append(named, k)
				}
			}
		}
		slices.Sort(named)
		named = slices.Compact(named)
	}
	ds := make([]domain, 1, 1+len(named)) // two values for a label are rare
	for _, label := range named {
		// p.values(label), without a slice for each
		rec, recorded := p.Claim.Groups[label]
		if recorded {
			ds = append(ds, domain{label, rec})
		}
		if cur, ok := p.Labels[label]; ok && (!recorded || cur != rec) {
			ds = append(ds, domain{label, cur})
		}
	}
	return ds
}

// names lists the names of ps at the indices in.
func names(ps []Participant, in []int) string {
	ns := make([]string, len(in))
	for j, i := range in {
		ns[j] = ps[i].Name
	}
	return strings.Join(ns, ", ")
}

// Decision is what a node that announced (entering) does after verifying.
type Decision int

// Decisions.
const (
	Commit   Decision = iota + 1 // every limit holds with this node in: take the slot
	Stay                         // only entering claims behind this node are in the way: they will step back
	StepBack                     // a holder, or an entering claim ahead, is in the way: back to waiting
)

func (d Decision) String() string {
	switch d {
	case Commit:
		return "commit"
	case Stay:
		return "stay entering"
	case StepBack:
		return "step back"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Verdict is a decision and, when it is not Commit, why.
type Verdict struct {
	Decision Decision
	Reason   string
}

// Verify decides for self, whose claim is entering, over a consistent
// snapshot. own is self's configuration. For every domain self is in (the
// cluster, and each group rule that self's configuration, its published
// claim or any active claim names, on self's label values), the limit is
// the smallest of own, self's published limits and those published by the
// active claims in that domain. Commit if the active claims plus self fit
// in every domain; otherwise stay if the holders plus the entering claims
// ahead of self fit; otherwise step back. A domain self is not in never
// blocks it.
func Verify(self Participant, own Limits, snap []Participant, now time.Time, ttl time.Duration) Verdict {
	var others []Participant
	var theirs []rules
	for _, p := range snap {
		if p.Name != self.Name && p.active(now, ttl) {
			others = append(others, p)
			theirs = append(theirs, indexed(p.Claim.Limits))
		}
	}
	waiting := claimants(snap, now, ttl)
	mine, published := indexed(own), indexed(self.Claim.Limits)
	v := Verdict{Decision: Commit}
	var in []int // the active claims in a domain, as indices into others
	for _, d := range domainsOf(self, ruleLabels(snap, own, self.Claim.Limits)) {
		in = in[:0]
		lim, ok := mine.bind(d, 0, false)
		lim, ok = published.bind(d, lim, ok)
		for i := range others {
			if d.contains(&others[i]) {
				in = append(in, i)
				lim, ok = theirs[i].bind(d, lim, ok)
			}
		}
		lim, ok = waiting.bind(d, lim, ok)
		if !ok || len(in)+1 <= lim {
			continue
		}
		ahead := 0 // holders, and entering claims not behind self
		for _, i := range in {
			if p := others[i]; p.Claim.State != Entering || p.Err != nil || !precedes(self, p) {
				ahead++
			}
		}
		full := fmt.Sprintf("%s is full: %d of %d taken (%s)", d, len(in), lim, names(others, in))
		switch {
		case ahead+1 > lim:
			return Verdict{Decision: StepBack, Reason: full}
		case v.Decision == Commit:
			v = Verdict{Decision: Stay, Reason: full + "; the entering ones behind this node will step back"}
		}
	}
	return v
}

// Queue is the fair order of one snapshot (eligibility, step 2 of the
// protocol): the active claims, then the waiting ones in (since, name)
// order, each admitted if it fits with everything admitted before it.
// Only limits published in claims count, so that every node computes the
// same queue from the same snapshot. A waiting node is eligible when it is
// admitted.
type Queue struct {
	Admitted []string          // active claims, then admitted waiting ones
	Waiting  []string          // every waiting claim, in queue order
	Blocked  map[string]string // waiting node -> which limit keeps it out
	// BlockedIn is, for each blocked node, the labels of every group
	// domain full to it ("" for the whole cluster's concurrency).
	BlockedIn map[string][]string
	Skipped   map[string]string // waiting node -> why it was passed over
}

// Why a waiting node is passed over (Queue.Skipped).
const (
	SkippedNotReady = "the node is not Ready"
	SkippedSilent   = "it did not take its turn in time (its daemon may be gone)"
)

// Eligibility computes the queue. skip reports waiting nodes to pass over
// (their daemon seems gone: eligible for longer than the grace period
// without announcing); waiting nodes that are not Ready are passed over
// too, and unreadable waiting claims are ignored.
func Eligibility(snap []Participant, now time.Time, ttl time.Duration, skip func(name string) bool) Queue {
	return EligibilityUpTo(snap, now, ttl, skip, "")
}

// EligibilityUpTo is Eligibility deciding only the waiting nodes up to
// and including last (all of them if last is "" or not waiting): a node
// is decided from the nodes ahead of it alone, so the queue up to last is
// the same, and a waiting daemon, which needs only its own place, does
// not work through the whole queue behind it on every change. Waiting
// still lists every waiting claim.
func EligibilityUpTo(snap []Participant, now time.Time, ttl time.Duration, skip func(name string) bool, last string) Queue {
	q := Queue{Blocked: map[string]string{}, BlockedIn: map[string][]string{}, Skipped: map[string]string{}}
	var admitted, waiting []Participant
	for _, p := range snap {
		switch {
		case p.active(now, ttl):
			admitted = append(admitted, p)
		case p.Claim.State == Waiting && p.Err == nil:
			waiting = append(waiting, p)
		}
	}
	slices.SortFunc(admitted, byQueueOrder)
	slices.SortFunc(waiting, byQueueOrder)
	bound := claimants(snap, now, ttl)
	labels := ruleLabels(snap)
	theirs := make([]rules, len(admitted), len(admitted)+len(waiting))
	for i, p := range admitted {
		q.Admitted = append(q.Admitted, p.Name)
		theirs[i] = indexed(p.Claim.Limits)
	}
	decided := false
	for _, w := range waiting {
		q.Waiting = append(q.Waiting, w.Name)
		if decided {
			continue
		}
		decided = w.Name == last
		switch {
		case !w.Ready:
			q.Skipped[w.Name] = SkippedNotReady
			continue
		case skip != nil && skip(w.Name):
			q.Skipped[w.Name] = SkippedSilent
			continue
		}
		r := indexed(w.Claim.Limits)
		if why, in := blocks(w, r, admitted, theirs, bound, labels); why != "" {
			q.Blocked[w.Name], q.BlockedIn[w.Name] = why, in
			continue
		}
		admitted, theirs = append(admitted, w), append(theirs, r)
		q.Admitted = append(q.Admitted, w.Name)
	}
	return q
}

// blocks says which limit keeps w out of the admitted set, or "": the
// limits of w (mine), of the admitted claims (theirs, index for index)
// and of the waiting claimants in each domain, under labels (every label
// a rule of the snapshot names). It also lists the labels of every
// domain full to w, the first of which the reason names.
func blocks(w Participant, mine rules, admitted []Participant, theirs []rules, waiting claimed, labels labelSet) (why string, full []string) {
	// Indices, not copies: a waiting daemon decides every node ahead of it
	// against every admitted one on each change it sees.
	var in []int
	for _, d := range domainsOf(w, labels) {
		in = in[:0]
		lim, ok := mine.bind(d, 0, false)
		for i := range admitted {
			if d.contains(&admitted[i]) {
				in = append(in, i)
				lim, ok = theirs[i].bind(d, lim, ok)
			}
		}
		lim, ok = waiting.bind(d, lim, ok)
		if ok && len(in)+1 > lim {
			if why == "" {
				why = fmt.Sprintf("%s is full: %d of %d (%s)", d, len(in), lim, names(admitted, in))
			}
			full = append(full, d.label)
		}
	}
	return why, full
}

// Position is name's place among the waiting claims (0 = first), or -1.
func (q Queue) Position(name string) int { return slices.Index(q.Waiting, name) }

// Eligible reports whether name is a waiting claim that was admitted.
func (q Queue) Eligible(name string) bool {
	return slices.Contains(q.Waiting, name) && slices.Contains(q.Admitted, name)
}

// Alarm is a claim that has kept its place longer than it should.
type Alarm struct {
	Node       string
	State      State
	Since      time.Time // what the age counts from (identifies the episode)
	Age        time.Duration
	Unreadable bool // the claim cannot be read (it counts as holding unless its label says waiting)
	What       string
}

// Alarms lists the active claims older than their alarm age (holding:
// since it committed; entering: since it announced), and the claims that
// cannot be read or are not believed (Plausible). They keep their place:
// the alarm says what to do.
func Alarms(snap []Participant, now time.Time, holdAge, enterAge time.Duration) []Alarm {
	var out []Alarm
	for _, p := range snap {
		unreadable := "claim cannot be read"
		if errors.Is(p.Err, ErrImplausible) {
			unreadable = "claim is not believed"
		}
		switch {
		case p.Err != nil && p.Claim.State == Waiting:
			binds := ""
			if WaitingLimitsBind(p) {
				binds = ", and every node keeps to concurrency 1 while it waits"
			}
			out = append(out, Alarm{Node: p.Name, State: p.Claim.State, Unreadable: true, What: fmt.Sprintf(
				"%s (%v); its label says waiting, so the node is left out of the queue%s, until the claim is fixed or removed", unreadable, p.Err, binds)})
		case p.Err != nil:
			out = append(out, Alarm{Node: p.Name, State: p.Claim.State, Unreadable: true, What: fmt.Sprintf(
				"%s (%v); it counts as holding a slot until it is fixed or removed", unreadable, p.Err)})
		case p.Claim.State == Holding:
			since := p.Claim.Updated
			if p.Claim.Acquired != nil {
				since = *p.Claim.Acquired
			}
			if age := now.Sub(since); age > holdAge {
				out = append(out, Alarm{Node: p.Name, State: Holding, Since: since, Age: age, What: fmt.Sprintf(
					"has held a reboot slot for %s (phase %q): bring the node back; if its machine is dead, delete its Node object or remove its claim by hand (either frees the slot at once, even if the node is still rebooting)", age.Round(time.Second), p.Claim.Phase)})
			}
		case p.Claim.State == Entering:
			if age := now.Sub(p.Claim.Updated); age > enterAge {
				out = append(out, Alarm{Node: p.Name, State: Entering, Since: p.Claim.Updated, Age: age, What: fmt.Sprintf(
					"has been taking a slot for %s, which normally takes a second: its daemon is probably gone; removing its claim by hand is safe", age.Round(time.Second))})
			}
		}
	}
	slices.SortFunc(out, func(a, b Alarm) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Yield reports whether self, entering, should give way to a waiting node
// ahead of it in the queue that can go now: it computes the queue as if
// self alone were still waiting (every other claim as it is) and gives way
// only if self would not be admitted while a waiting node ahead of it
// would. Giving way is only about fairness (a node that announced from a
// stale view steps back for the one whose turn it is); stepping back is
// always safe. A node that cannot go now (blocked by an entering claim
// whose daemon is gone, say) is never given way to: that repeated forever
// while slots were free.
func Yield(self Participant, snap []Participant, now time.Time, ttl time.Duration, skip func(string) bool) (bool, string) {
	view := make([]Participant, 0, len(snap))
	for _, p := range snap {
		if p.Name == self.Name {
			p.Claim.State = Waiting
			p.Ready = true // it is running this code
		}
		view = append(view, p)
	}
	q := Eligibility(view, now, ttl, func(n string) bool { return n != self.Name && skip != nil && skip(n) })
	if q.Eligible(self.Name) {
		return false, ""
	}
	admitted := make(map[string]bool, len(q.Admitted))
	for _, n := range q.Admitted {
		admitted[n] = true
	}
	var ahead []string
	for _, n := range q.Waiting {
		if n == self.Name {
			break
		}
		if admitted[n] { // eligible: waiting and admitted
			ahead = append(ahead, n)
		}
	}
	if len(ahead) == 0 {
		return false, ""
	}
	if why := q.Blocked[self.Name]; why != "" {
		return true, fmt.Sprintf("giving way: %s (next: %s)", why, strings.Join(ahead, ", "))
	}
	return true, "giving way to " + strings.Join(ahead, ", ")
}
