// Package status is what `kured-host status` shows: from one consistent
// List of Nodes, the nodes that take part in the slot lock in queue order,
// why each waiting one cannot go yet, the limits in force and where they
// come from, and what needs an operator (claims that cannot be read,
// claims past their alarm age, nodes that a group rule does not limit).
//
// Snapshot is a pure function of the Nodes, the local configuration and
// the time; it counts with the lock's own rules (daemon/claim) on the
// participants the lock itself builds (queue.Participants, which also
// judges each claim as another node's lock does: claim.Plausible). Render
// writes the table and JSON the schema of docs/status.md; Source reads
// the API.
package status

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/queue"
	"github.com/kured-host/kured-host/daemon/steer"
)

// SchemaVersion is the version of the JSON document (docs/status.md).
// Within a version fields may be added; none is removed or changes its
// meaning. Version 2 dropped `relabelled`: such a claim is now unreadable.
const SchemaVersion = 2

// States of a participating node as status shows them: the claim's state,
// or Unreadable for a claim that cannot be read or is not believed.
const (
	StateWaiting    = string(claim.Waiting)
	StateEntering   = string(claim.Entering)
	StateHolding    = string(claim.Holding)
	StateUnreadable = "unreadable"
)

// Kinds of limit source.
const (
	FromConfig   = "config"   // this machine's configuration file
	FromDefaults = "defaults" // the built-in defaults (no configuration file)
	FromCluster  = "cluster"  // the cluster's settings (kured-host settings)
	FromNode     = "node"     // published in a node's claim
)

// Local is the configuration of the machine status runs on.
type Local struct {
	Lock config.LockConfig
	// File is the configuration file that was read; "" when none exists.
	// Lock is then the built-in defaults, whose limits count only where no
	// claim publishes one: an admin's machine does not take part.
	File string
	// ConcurrencyFrom and GroupsFrom say where lock.concurrency and
	// lock.groups were set ("file:line"); "" for the built-in default.
	ConcurrencyFrom, GroupsFrom string
	// Self is the node status runs on, when known.
	Self string
	// SettingsError says why the cluster's settings could not be taken:
	// the nodes keep what they had.
	SettingsError string
}

// Report is one snapshot, as the table and the JSON show it.
type Report struct {
	Schema int       `json:"schema"`
	Time   time.Time `json:"time"`
	// Self is the node status ran on (with a node's credentials).
	Self   string     `json:"self,omitempty"`
	Config ConfigInfo `json:"config"`
	// NodesTotal counts every Node in the cluster, taking part or not.
	NodesTotal int `json:"nodes_total"`
	// GroupLabels are the group rules' labels: this configuration's and
	// those the claims publish.
	GroupLabels []string `json:"group_labels"`
	// Nodes are the nodes that take part (those with a claim), in queue
	// order: holders (and unreadable claims, which count as holding),
	// then entering, then waiting in (since, name) order.
	Nodes      []Node       `json:"nodes"`
	Summary    Summary      `json:"summary"`
	Limits     []Limit      `json:"limits"`
	Domains    []Domain     `json:"domains"`
	Alarms     []Alarm      `json:"alarms"`
	Unlabelled []Unlabelled `json:"unlabelled"`
	// Notes are the call-outs in words, as the table prints them.
	Notes []string `json:"notes"`
	// Paused is the cluster's pause (kured-host pause); absent when the
	// cluster is not paused. PauseError says why it could not be read.
	Paused     *Order `json:"paused,omitempty"`
	PauseError string `json:"pause_error,omitempty"`
	// Held are the nodes an operator holds (kured-host hold), taking
	// part or not, by name.
	Held []Held `json:"held"`
}

// Order is an operator's pause or hold.
type Order struct {
	Reason string     `json:"reason"`
	By     string     `json:"by,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
}

// Held is a held node.
type Held struct {
	Node string `json:"node"`
	Order
}

func orderOf(o steer.Order) Order {
	out := Order{Reason: o.Reason, By: o.By}
	if !o.Since.IsZero() {
		t := o.Since
		out.Since = &t
	}
	return out
}

// SetPause adds the cluster's pause, as read from its ConfigMap's data
// (nil: there is none), to the report.
func (r *Report) SetPause(data map[string]string) {
	o, paused := steer.PauseOf(data)
	if !paused {
		return
	}
	p := orderOf(o)
	r.Paused = &p
	for i, n := range r.Nodes {
		if n.State == StateWaiting && n.Eligible {
			r.Nodes[i].BlockedBy = "the cluster's pause: it keeps its place"
		}
	}
}

// ConfigInfo is the local configuration's lock settings.
type ConfigInfo struct {
	File                    string             `json:"file"`
	Concurrency             int                `json:"concurrency"`
	Groups                  []claim.GroupLimit `json:"groups"`
	AlarmAgeSeconds         int64              `json:"alarm_age_seconds"`
	EnteringAlarmAgeSeconds int64              `json:"entering_alarm_age_seconds"`
	TTLSeconds              int64              `json:"ttl_seconds"`
}

// Node is one participating node.
type Node struct {
	Name string `json:"name"`
	// State is waiting, entering, holding or unreadable; Label is the
	// claim label's value as it is on the Node.
	State string `json:"state"`
	Label string `json:"label"`
	// Active: the claim takes a slot (entering, holding, or unreadable
	// with an active or unknown label), unless lock.ttl counted it out.
	Active        bool `json:"active"`
	TTLExpired    bool `json:"ttl_expired,omitempty"`
	Ready         bool `json:"ready"`
	Unschedulable bool `json:"unschedulable"`
	// Groups are the node's current values of the group labels (a
	// missing label is absent); RecordedGroups those its claim recorded
	// when it announced.
	Groups         map[string]string `json:"groups"`
	RecordedGroups map[string]string `json:"recorded_groups,omitempty"`
	Phase          string            `json:"phase,omitempty"`
	Since          *time.Time        `json:"since,omitempty"`
	SinceSeconds   int64             `json:"since_seconds,omitempty"`
	Acquired       *time.Time        `json:"acquired,omitempty"`
	HoldingSeconds int64             `json:"holding_seconds,omitempty"`
	// Queue is the place among the waiting claims, from 1; 0 (absent)
	// when not waiting.
	Queue     int           `json:"queue,omitempty"`
	Eligible  bool          `json:"eligible,omitempty"`
	BlockedBy string        `json:"blocked_by,omitempty"`
	Published *claim.Limits `json:"published,omitempty"`
	Error     string        `json:"error,omitempty"`
}

// Summary counts the participating nodes.
type Summary struct {
	Participants int `json:"participants"`
	// Active is the slots taken: Holding + Entering + Unreadable (those
	// of them that count).
	Active     int `json:"active"`
	Holding    int `json:"holding"`
	Entering   int `json:"entering"`
	Unreadable int `json:"unreadable"`
	Waiting    int `json:"waiting"`
	Alarms     int `json:"alarms"`
	// Max is the global limit in force (the cluster domain's).
	Max int `json:"max"`
}

// From says where a limit comes from.
type From struct {
	Kind string `json:"source,omitempty"` // config, defaults or node; "" when nothing sets the limit
	// Node publishes it (Kind node), in its claim of state State.
	Node  string `json:"node,omitempty"`
	State string `json:"node_state,omitempty"`
	// Origin is the file and line of the configuration (Kind config).
	Origin string `json:"origin,omitempty"`
}

// Limit is one rule: the global concurrency (Label "") or a group label's
// max per value, the strictest in force over the whole snapshot.
type Limit struct {
	Label string `json:"label"`
	// Max is 0 when nothing sets this rule.
	Max int `json:"max"`
	From
	// Config is this configuration's value, 0 if it has no such rule.
	Config int `json:"config"`
}

// Domain is where a limit applies: the cluster (Label "") or the nodes
// sharing a value of a group label.
type Domain struct {
	Label   string   `json:"label"`
	Value   string   `json:"value"`
	Active  []string `json:"active"`
	Waiting int      `json:"waiting"`
	Max     int      `json:"max"`
	From
}

// Alarm is a claim that needs an operator.
type Alarm struct {
	Node string `json:"node"`
	// Kind is holding or entering (past its alarm age) or unreadable.
	Kind       string `json:"kind"`
	AgeSeconds int64  `json:"age_seconds,omitempty"`
	Message    string `json:"message"`
}

// Unlabelled is a participating node without a group rule's label: that
// rule does not limit it.
type Unlabelled struct {
	Node  string `json:"node"`
	Label string `json:"label"`
}

// snap is one snapshot being reported.
type snap struct {
	ps     []claim.Participant
	local  Local
	own    claim.Limits
	now    time.Time
	ttl    time.Duration
	labels []string
}

// Snapshot reports on nodes (one consistent List of every Node) as the
// local configuration sees them at now, the API server's time: every
// claim is judged as another node's lock judges it, against now and the
// configuration's clock tolerance (the claim of the node status runs on
// too: the others do not trust it either).
func Snapshot(nodes []corev1.Node, local Local, now time.Time) Report {
	ptrs := make([]*corev1.Node, len(nodes))
	unschedulable := map[string]bool{}
	for i := range nodes {
		ptrs[i] = &nodes[i]
		unschedulable[nodes[i].Name] = nodes[i].Spec.Unschedulable
	}
	tolerance, _ := local.Lock.ClockTolerance()
	s := &snap{ps: queue.Participants(ptrs, now, tolerance), local: local, own: local.Lock.Limits(), now: now, ttl: local.Lock.TTL.Std()}
	s.labels = s.groupLabels()
	q := claim.Eligibility(s.ps, now, s.ttl, nil)
	// Waiting nodes in the queue's order, the others by since.
	slices.SortFunc(s.ps, func(a, b claim.Participant) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(q.Position(a.Name), q.Position(b.Name)), claim.QueueOrder(a, b))
	})
	r := Report{
		Schema: SchemaVersion, Time: now, Self: local.Self, Config: configInfo(local),
		NodesTotal: len(nodes), GroupLabels: s.labels, Nodes: []Node{},
	}
	for _, p := range s.ps {
		r.Nodes = append(r.Nodes, s.node(p, q, unschedulable[p.Name]))
	}
	r.Limits = s.limits()
	r.Domains = s.domains()
	r.Alarms = s.alarms()
	r.Unlabelled = s.unlabelled()
	r.Summary = summarize(r)
	r.Notes = notes(r)
	if e := local.SettingsError; e != "" {
		r.Notes = append(r.Notes, "the cluster's settings are not valid, so the nodes keep what they had (kured-host settings): "+e)
	}
	r.Held = []Held{}
	for i := range nodes {
		if o, held := steer.HoldOf(&nodes[i]); held {
			r.Held = append(r.Held, Held{Node: nodes[i].Name, Order: orderOf(o)})
		}
	}
	slices.SortFunc(r.Held, func(a, b Held) int { return cmp.Compare(a.Node, b.Node) })
	return r
}

// rank orders the table: holders (and claims that count as holding),
// entering, waiting, then waiting claims that cannot be read (ignored).
func rank(p claim.Participant) int {
	switch {
	case p.Claim.State == claim.Holding, p.Err != nil && p.Claim.State.Active():
		return 0
	case p.Claim.State == claim.Entering:
		return 1
	case p.Err == nil:
		return 2
	}
	return 3
}

func configInfo(l Local) ConfigInfo {
	own := l.Lock.Limits()
	return ConfigInfo{
		File: l.File, Concurrency: own.Concurrency, Groups: append([]claim.GroupLimit{}, own.Groups...),
		AlarmAgeSeconds:         seconds(l.Lock.AlarmAge.Std()),
		EnteringAlarmAgeSeconds: seconds(l.Lock.EnteringAlarmAge.Std()),
		TTLSeconds:              seconds(l.Lock.TTL.Std()),
	}
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// groupLabels are the labels the claims' published group rules name, and
// this configuration's (the defaults' only when no claim can be read).
func (s *snap) groupLabels() []string {
	labels := []string{}
	add := func(ls claim.Limits) {
		for _, g := range ls.Groups {
			if !slices.Contains(labels, g.Label) {
				labels = append(labels, g.Label)
			}
		}
	}
	readable := false
	for _, p := range s.ps {
		if p.Err == nil {
			add(p.Claim.Limits)
			readable = true
		}
	}
	if s.local.File != "" || !readable {
		add(s.own)
	}
	slices.Sort(labels)
	return labels
}

func (s *snap) node(p claim.Participant, q claim.Queue, unschedulable bool) Node {
	n := Node{
		Name: p.Name, State: string(p.Claim.State), Label: p.Labels[claim.Label],
		Active: p.Active(s.now, s.ttl), Ready: p.Ready, Unschedulable: unschedulable,
		Groups: map[string]string{},
	}
	for _, l := range s.labels {
		if v, ok := p.Labels[l]; ok {
			n.Groups[l] = v
		}
	}
	c := p.Claim
	if len(c.Groups) > 0 {
		// An unreadable claim counts in what it recorded too.
		n.RecordedGroups = c.Groups
	}
	if p.Err != nil {
		n.State, n.Error = StateUnreadable, p.Err.Error()
		return n
	}
	n.Published = &claim.Limits{Concurrency: c.Limits.Concurrency, Groups: c.Limits.Groups}
	if !c.Since.IsZero() {
		since := c.Since
		n.Since, n.SinceSeconds = &since, seconds(s.now.Sub(since))
	}
	switch c.State {
	case claim.Holding:
		n.Phase = string(c.Phase)
		if c.Phase == claim.PhaseAcquired {
			n.Phase = "acquired"
		}
		acquired := c.Updated
		if c.Acquired != nil {
			acquired = *c.Acquired
		}
		n.Acquired, n.HoldingSeconds = &acquired, seconds(s.now.Sub(acquired))
		n.TTLExpired = !n.Active
	case claim.Waiting:
		n.Queue = q.Position(p.Name) + 1
		n.Eligible = q.Eligible(p.Name)
		n.BlockedBy = cmp.Or(q.Blocked[p.Name], q.Skipped[p.Name])
	}
	return n
}

// candidate is a set of limits and where it comes from.
type candidate struct {
	limits claim.Limits
	src    From
}

// limitFor is the strictest limit of label's rule for members (the
// participants of a domain): this configuration, the active claims and the
// readable waiting claims among members (they bind too, as the lock counts
// them); then the built-in defaults when there is no configuration file.
func (s *snap) limitFor(label string, members []claim.Participant) (int, From) {
	var active, defaults []candidate
	set := s.local.ConcurrencyFrom
	if label != "" {
		set = s.local.GroupsFrom
	}
	switch {
	case strings.HasPrefix(set, config.ClusterSource):
		active = append(active, candidate{s.own, From{Kind: FromCluster, Origin: set}})
	case s.local.File != "":
		active = append(active, candidate{s.own, From{Kind: FromConfig, Origin: cmp.Or(set, s.local.File)}})
	default:
		defaults = append(defaults, candidate{s.own, From{Kind: FromDefaults}})
	}
	for _, p := range members {
		c := candidate{p.Claim.Limits, From{Kind: FromNode, Node: p.Name, State: string(p.Claim.State)}}
		if p.Err != nil {
			c.src.State = StateUnreadable
		}
		if p.Active(s.now, s.ttl) || claim.WaitingLimitsBind(p) {
			active = append(active, c)
		}
	}
	for _, tier := range [][]candidate{active, defaults} {
		ls := make([]claim.Limits, len(tier))
		for i, c := range tier {
			ls[i] = c.limits
		}
		if lim, i := claim.Strictest(label, ls); i >= 0 {
			return lim, tier[i].src
		}
	}
	return 0, From{}
}

func (s *snap) limits() []Limit {
	out := []Limit{}
	for _, label := range append([]string{""}, s.labels...) {
		lim, src := s.limitFor(label, s.ps)
		own, _ := claim.Strictest(label, []claim.Limits{s.own})
		out = append(out, Limit{Label: label, Max: lim, From: src, Config: own})
	}
	return out
}

// counted are the participants that count in the queue: all but the
// waiting claims that cannot be read.
func (s *snap) counted() []claim.Participant {
	return slices.DeleteFunc(slices.Clone(s.ps), func(p claim.Participant) bool { return rank(p) == 3 })
}

func (s *snap) domains() []Domain {
	out := []Domain{s.domain("", "", s.counted())}
	for _, label := range s.labels {
		var values []string
		for _, p := range s.counted() {
			for _, v := range p.Values(label) {
				if !slices.Contains(values, v) {
					values = append(values, v)
				}
			}
		}
		slices.Sort(values)
		for _, v := range values {
			in := slices.DeleteFunc(s.counted(), func(p claim.Participant) bool { return !slices.Contains(p.Values(label), v) })
			out = append(out, s.domain(label, v, in))
		}
	}
	return out
}

func (s *snap) domain(label, value string, members []claim.Participant) Domain {
	d := Domain{Label: label, Value: value, Active: []string{}}
	for _, p := range members {
		switch {
		case p.Active(s.now, s.ttl):
			d.Active = append(d.Active, p.Name)
		case p.Claim.State == claim.Waiting:
			d.Waiting++
		}
	}
	d.Max, d.From = s.limitFor(label, members)
	return d
}

func (s *snap) alarms() []Alarm {
	out := []Alarm{}
	for _, a := range claim.Alarms(s.ps, s.now, s.local.Lock.AlarmAge.Std(), s.local.Lock.EnteringAlarmAge.Std()) {
		al := Alarm{Node: a.Node, Kind: string(a.State), AgeSeconds: seconds(a.Age), Message: a.Node + " " + a.What}
		if a.Unreadable {
			al.Kind, al.Message = StateUnreadable, a.Node+": "+a.What
			if a.State == claim.Waiting {
				i := slices.IndexFunc(s.ps, func(p claim.Participant) bool { return p.Name == a.Node })
				verb := "cannot be read"
				if errors.Is(s.ps[i].Err, claim.ErrImplausible) {
					verb = "is not believed"
				}
				al.Message = fmt.Sprintf("%s: waiting claim %s (%v); the queue ignores it until it is fixed or removed", a.Node, verb, s.ps[i].Err)
			}
		}
		out = append(out, al)
	}
	return out
}

func (s *snap) unlabelled() []Unlabelled {
	out := []Unlabelled{}
	for _, label := range s.labels {
		for _, p := range s.counted() {
			if len(p.Values(label)) == 0 {
				out = append(out, Unlabelled{Node: p.Name, Label: label})
			}
		}
	}
	return out
}

func summarize(r Report) Summary {
	s := Summary{Participants: len(r.Nodes), Alarms: len(r.Alarms), Max: r.Domains[0].Max}
	for _, n := range r.Nodes {
		if n.Active {
			s.Active++
			switch n.State {
			case StateHolding:
				s.Holding++
			case StateEntering:
				s.Entering++
			case StateUnreadable:
				s.Unreadable++
			}
		}
		if n.State == StateWaiting {
			s.Waiting++
		}
	}
	return s
}

// notes are the call-outs in words.
func notes(r Report) []string {
	out := []string{}
	for _, a := range r.Alarms {
		out = append(out, a.Message)
	}
	for _, n := range r.Nodes {
		if n.TTLExpired {
			out = append(out, fmt.Sprintf("%s has held its slot for %s, longer than lock.ttl (%s): it no longer counts, so another node may go down while it is still away",
				n.Name, age(time.Duration(n.HoldingSeconds)*time.Second), config.Duration(time.Duration(r.Config.TTLSeconds)*time.Second)))
		}
	}
	byLabel := map[string][]string{}
	for _, u := range r.Unlabelled {
		byLabel[u.Label] = append(byLabel[u.Label], u.Node)
	}
	for _, label := range r.GroupLabels {
		if ns := byLabel[label]; len(ns) > 0 {
			out = append(out, fmt.Sprintf("%s: no %s label, so the limit per %s does not apply to %s",
				strings.Join(ns, ", "), label, short(label), them(len(ns))))
		}
	}
	for _, d := range r.Domains {
		if d.Max > 0 && len(d.Active) > d.Max {
			out = append(out, overLimit(d, r.Summary.Entering > 0, unreadableIn(d, r.Nodes)))
		}
	}
	return out
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// unreadableIn names the active members of d whose claims are
// unreadable.
func unreadableIn(d Domain, nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		if n.State == StateUnreadable && slices.Contains(d.Active, n.Name) {
			out = append(out, n.Name)
		}
	}
	return out
}

// overLimit explains a domain with more active claims than its limit.
func overLimit(d Domain, entering bool, unreadable []string) string {
	why := "a claim's published limit or its recorded group differs from what the others see"
	switch {
	case d.State == StateUnreadable:
		why = "a claim that cannot be read counts as holding with concurrency 1; no other node takes a slot until it is fixed or removed"
	case len(unreadable) > 0:
		why = fmt.Sprintf("unreadable claims (%s) count as holding, in the groups they recorded and in their nodes' current ones; no other node takes a slot here until they are fixed or removed",
			strings.Join(unreadable, ", "))
	case d.Kind == FromConfig:
		why = "this configuration is stricter than the limits they took their slots under; it binds this node only"
	case entering:
		why = "entering claims step back when they verify"
	}
	return fmt.Sprintf("%s: %d slots taken (%s), above its limit of %d (%s): %s",
		domainName(d), len(d.Active), strings.Join(d.Active, ", "), d.Max, d.From.String(), why)
}

func domainName(d Domain) string {
	if d.Label == "" {
		return "the cluster"
	}
	return d.Label + "=" + d.Value
}

func (s From) String() string {
	switch s.Kind {
	case FromConfig:
		return "this configuration, " + s.Origin
	case FromDefaults:
		return "built-in default: no configuration file"
	case FromCluster:
		if line, ok := strings.CutPrefix(s.Origin, config.ClusterSource+":"); ok {
			return "the cluster's settings, line " + line
		}
		return "the cluster's settings"
	case FromNode:
		return "published by " + s.Node + ", " + s.State
	}
	return "nothing sets it"
}

// short is a label's last path element: "zone" for
// topology.kubernetes.io/zone.
func short(label string) string {
	if i := strings.LastIndexByte(label, '/'); i >= 0 && i < len(label)-1 {
		return label[i+1:]
	}
	return label
}
