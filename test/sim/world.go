// Package sim runs the real kured-host daemon (lock, cycle, drain) on many
// simulated hosts against an in-memory API server (test/sim/api), on
// virtual time (testing/synctest), under faults drawn from a seed, and
// checks the invariants after every write and the progress at the end.
// docs/simulation.md says what it covers and how to replay a seed.
package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/internal/audit"
	"github.com/kured-host/kured-host/test/sim/api"
)

// Span is a range of durations to draw from.
type Span struct{ Min, Max time.Duration }

// World is one simulated cluster.
type World struct {
	o     Options
	ctx   context.Context
	store *api.Store
	Hosts []*Host
	start time.Time

	rngMu sync.Mutex
	rng   *rand.Rand

	// faulted: the node a scenario's fault hit, and when (noteFault).
	faultMu   sync.Mutex
	faulted   string
	faultedAt time.Time

	wg      sync.WaitGroup
	clients clientSet
	logs    *logs

	mu         sync.Mutex
	trace      []string
	violations []string
	pods       int
	// unavailable counts, per app, evicted pods not yet replaced.
	unavailable map[string]int
	// lastState is each Node's last traced state.
	lastState map[string]string
	// heldIn is the true boot each holder took its slot in.
	heldIn map[string]string
	// lastNode is each Node as its last revision left it.
	lastNode map[string]*corev1.Node
	// outageUntil is when the API server's current outage ends.
	outageUntil time.Time
	// idle records the idle-slot episodes reported.
	idle map[string]bool
	// stuck: each app's budget refuses every eviction until then.
	stuck map[string]time.Time
	// orders are the operator's pauses and holds.
	orders orders
	// settingsSet: the cluster's settings were written during the run.
	settingsSet atomic.Bool
}

// New builds the world of o (nothing runs until Run).
func New(o Options) *World {
	w := &World{
		o: o, store: api.NewStore(), rng: rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed)),
		logs: newLogs(), unavailable: map[string]int{}, lastState: map[string]string{}, heldIn: map[string]string{}, lastNode: map[string]*corev1.Node{}, idle: map[string]bool{}, stuck: map[string]time.Time{},
		orders: orders{heldSince: map[string]time.Time{}, unheld: map[string]time.Time{}},
	}
	return w
}

func (w *World) rngUint() uint64 {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.Uint64()
}

func (w *World) chance(p float64) bool {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.Float64() < p
}

func (w *World) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

func (w *World) draw(s Span) time.Duration {
	if s.Max <= s.Min {
		return s.Min
	}
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return s.Min + time.Duration(w.rng.Int64N(int64(s.Max-s.Min)))
}

// goSafe runs f in the world's goroutine group, waited for at the end.
func (w *World) goSafe(f func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f()
	}()
}

func (w *World) since() time.Duration { return time.Since(w.start) }

// tracef adds a line to the run's trace, with the virtual time.
func (w *World) tracef(node, format string, args ...any) {
	line := fmt.Sprintf("%10s  %-8s %s", fmtDur(w.since()), node, fmt.Sprintf(format, args...))
	w.mu.Lock()
	w.trace = append(w.trace, line)
	w.mu.Unlock()
}

// noteFault records the node a scenario's fault hit, now, for its check.
func (w *World) noteFault(node string) {
	w.faultMu.Lock()
	defer w.faultMu.Unlock()
	w.faulted, w.faultedAt = node, time.Now()
}

func (w *World) violate(format string, args ...any) {
	v := fmt.Sprintf("at %s: ", fmtDur(w.since())) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.violations = append(w.violations, v)
	w.trace = append(w.trace, "           VIOLATION "+v)
	w.mu.Unlock()
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Millisecond)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, d%time.Minute
	if h > 0 {
		return fmt.Sprintf("%dh%02dm%06.3fs", h, m, s.Seconds())
	}
	return fmt.Sprintf("%dm%06.3fs", m, s.Seconds())
}

// Result is what a run found.
type Result struct {
	Violations []string
	Trace      []string
	Logs       string
	// Took is the virtual time the run took; NodeHours the machines'
	// virtual time in all.
	Took      time.Duration
	Requests  int
	Reboots   int
	Completed bool
}

// Run runs the world until every live host that needs a reboot has had it
// and no claim is left, or until o.Deadline; then it stops everything and
// checks. It must run inside a synctest bubble.
func (w *World) Run(parent context.Context) Result {
	ctx, cancel := context.WithCancel(parent)
	w.ctx = ctx
	w.start = time.Now()
	w.store.OnNode = w.onNode
	w.store.OnEvict = w.onEvict
	w.store.Faults.Evict = w.budget
	w.build()
	if w.o.Setup != nil {
		w.o.Setup(w)
	}
	for _, h := range w.Hosts {
		if err := h.register(); err != nil {
			w.violate("register %s: %v", h.Name, err)
		}
		w.addPods(h, w.o.PodsPerNode)
	}
	// The faults are armed before anything runs: the store reads its
	// fault hooks without a lock.
	w.startFaults()
	if w.o.Script != nil {
		w.o.Script(w)
	}
	for _, h := range w.Hosts {
		h.powerOn()
	}
	// The kernel update lands on every node within a few minutes.
	for _, h := range w.Hosts {
		after := w.draw(w.o.NeedSpread)
		if w.o.NeedAt != nil {
			after = w.o.NeedAt(h)
		}
		w.goSafe(func() {
			if sleep(ctx, after) == nil {
				w.tracef(h.Name, "needs a reboot")
				h.NeedReboot()
			}
		})
	}
	w.goSafe(w.operator)
	w.goSafe(w.watchProgress)
	done := w.waitDone(ctx)
	took := w.since()
	cancel()
	for _, h := range w.Hosts {
		h.mu.Lock()
		d := h.daemon
		h.mu.Unlock()
		if d != nil {
			d.kill()
		}
	}
	w.store.EndWatches("")
	w.wg.Wait()
	// A drain that ended by its time-out or its context leaves kubectl's
	// eviction goroutines asleep for up to the retry delay (5 s); they
	// see the cancellation then and exit. A bubble must end with none.
	time.Sleep(6 * time.Second)
	w.clients.SeverAll()
	w.finalChecks(done)
	w.mu.Lock()
	defer w.mu.Unlock()
	reboots := 0
	for _, h := range w.Hosts {
		reboots += h.Planned
	}
	return Result{
		Violations: slices.Clone(w.violations), Trace: slices.Clone(w.trace), Logs: w.logs.String(),
		Took: took, Requests: w.clients.Requests(), Reboots: reboots, Completed: done,
	}
}

// build creates the hosts with their configurations.
func (w *World) build() {
	for i := range w.o.Nodes {
		h := &Host{w: w, Name: fmt.Sprintf("n%02d", i), Graceful: w.chance(0.5)}
		if w.o.Zones > 0 {
			z := i % w.o.Zones
			if w.o.Skewed && w.chance(0.75) {
				z = 0
			}
			h.Zone = fmt.Sprintf("zone-%c", 'a'+z)
		}
		h.Cfg = w.o.Config(w, i)
		h.KubeletDelay = w.draw(w.o.KubeletDelay)
		h.Clock = w.o.ClockOffset(w, i)
		w.Hosts = append(w.Hosts, h)
	}
}

// waitDone waits until nothing is left to do, or the deadline.
func (w *World) waitDone(ctx context.Context) bool {
	deadline := time.Now().Add(w.o.Deadline)
	for time.Now().Before(deadline) {
		if sleep(ctx, 10*time.Second) != nil {
			return false
		}
		w.clients.Forget()
		if w.settled() {
			return true
		}
	}
	return false
}

// settled: every live host has booted since it needed a reboot, is up,
// its kubelet has reported the boot, and no claim is left on a live
// host's Node.
func (w *World) settled() bool {
	if w.since() < w.o.NeedSpread.Max+time.Second {
		return false
	}
	for _, h := range w.Hosts {
		h.mu.Lock()
		dead, needed, up := h.dead, h.needed, h.up
		h.mu.Unlock()
		if dead {
			continue
		}
		if needed || !up {
			return false
		}
		n := w.store.Node(h.Name)
		if n == nil {
			return false
		}
		if n.Labels[claim.Label] != "" || n.Annotations[claim.Annotation] != "" || n.Spec.Unschedulable {
			return false
		}
	}
	return true
}

// onNode traces each Node's changes and checks the releases. It runs
// inside the store's critical section: it must not call the store.
func (w *World) onNode(r api.Revision) {
	n := r.Node
	state := "deleted"
	if !r.Deleted {
		state = summary(n)
	}
	w.mu.Lock()
	changed := w.lastState[n.Name] != state
	w.lastState[n.Name] = state
	prev := w.lastNode[n.Name]
	if r.Deleted {
		delete(w.lastNode, n.Name)
	} else {
		w.lastNode[n.Name] = n
	}
	w.mu.Unlock()
	if changed {
		by := ""
		if r.By != api.NodeIdentity(n.Name) {
			by = " (by " + r.By + ")"
		}
		w.tracef(n.Name, "%s%s", state, by)
	}
	w.checkRelease(r, prev)
	w.checkCommit(r, prev)
	w.checkOrders(r, prev)
}

// checkCommit: a node takes a slot only from the entering claim it
// announced, label and annotation as it wrote them: a commit on a claim
// someone else changed since (an admin's label-only edit) is how two nodes
// came to hold at concurrency 1 (S1).
func (w *World) checkCommit(r api.Revision, prev *corev1.Node) {
	n := r.Node
	if r.Deleted || r.By != api.NodeIdentity(n.Name) || claim.State(n.Labels[claim.Label]) != claim.Holding {
		return
	}
	if prev != nil && claim.State(prev.Labels[claim.Label]) == claim.Holding {
		return
	}
	var was claim.Claim
	err := errors.New("no claim")
	if prev != nil {
		was, err = claim.Parse(prev.Labels[claim.Label], prev.Annotations[claim.Annotation])
	}
	if err != nil || was.State != claim.Entering {
		w.violate("%s took a slot from a claim that was not its entering claim (%s)", n.Name, summaryOf(prev))
	}
}

func summaryOf(n *corev1.Node) string {
	if n == nil {
		return "no Node"
	}
	return summary(n)
}

// summary is a Node's state as the trace shows it.
func summary(n *corev1.Node) string {
	var b strings.Builder
	lv := n.Labels[claim.Label]
	if lv == "" && n.Annotations[claim.Annotation] == "" {
		b.WriteString("no claim")
	} else {
		c, err := claim.Parse(lv, n.Annotations[claim.Annotation])
		b.WriteString(lv)
		if c.Phase != "" {
			b.WriteString("/" + string(c.Phase))
		}
		if err != nil {
			b.WriteString(" (unreadable)")
		}
	}
	if n.Spec.Unschedulable {
		b.WriteString(", cordoned")
	}
	ready := "NotReady"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = "Ready"
		}
	}
	fmt.Fprintf(&b, ", %s in %s", ready, n.Status.NodeInfo.BootID)
	return b.String()
}

// checkRelease: a node gives up a slot it held only once the kubelet
// reports the boot the node is in now, Ready, and that boot is not the
// one it took the slot in; or after it gave up before rebooting (aborted,
// the node left as it found it), or before doing anything with it. Only its own writes count: an admin who
// removes a claim, or deletes the Node, frees the slot by design.
func (w *World) checkRelease(r api.Revision, prev *corev1.Node) {
	n := r.Node
	h := w.host(n.Name)
	if h == nil {
		return
	}
	holding := !r.Deleted && claim.State(n.Labels[claim.Label]) == claim.Holding
	w.mu.Lock()
	held, was := w.heldIn[n.Name]
	switch {
	case holding && !was:
		b, _ := h.boot.Load().(string)
		w.heldIn[n.Name] = b
	case !holding && was:
		delete(w.heldIn, n.Name)
	}
	w.mu.Unlock()
	if holding || !was || r.By != api.NodeIdentity(n.Name) || r.Deleted {
		return
	}
	if prev != nil && (aborted(prev) || untouched(prev)) {
		return
	}
	now, _ := h.boot.Load().(string)
	switch {
	case now == held:
		w.violate("%s released its slot in the boot it took it in (%s), without aborting", n.Name, held)
	case n.Status.NodeInfo.BootID != now || !nodeReady(n):
		w.violate("%s released its slot while its Node shows boot %q (ready %v) and the host is in boot %q", n.Name, n.Status.NodeInfo.BootID, nodeReady(n), now)
	}
}

// untouched: the slot was taken and nothing done with it yet: a slot an
// earlier version took, whose commit did not cordon, given back when a
// blocker says no before the cordon.
func untouched(n *corev1.Node) bool {
	c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
	return err == nil && c.State == claim.Holding && c.Phase == claim.PhaseAcquired
}

func aborted(n *corev1.Node) bool {
	c, err := claim.Parse(n.Labels[claim.Label], n.Annotations[claim.Annotation])
	return err == nil && c.Phase == claim.PhaseAborted && n.Spec.Unschedulable == c.WasUnschedulable
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (w *World) host(name string) *Host {
	for _, h := range w.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// rebootAsked checks the request: the node holds its slot, and it is
// drained.
func (w *World) rebootAsked(h *Host) {
	n := w.store.Node(h.Name)
	if n == nil || claim.State(n.Labels[claim.Label]) != claim.Holding {
		w.violate("%s asked to reboot without holding a slot", h.Name)
	}
	left := w.store.Pods(func(p *corev1.Pod) bool { return p.Spec.NodeName == h.Name })
	if len(left) > 0 && !h.Cfg.Drain.ForceReboot {
		w.violate("%s asked to reboot with %d pods not drained (%s)", h.Name, len(left), left[0].Name)
	}
	if n != nil && !n.Spec.Unschedulable {
		// Drained but schedulable: new pods may land until it goes down.
		w.violate("%s asked to reboot while schedulable", h.Name)
	}
	w.tracef(h.Name, "asks to reboot")
}

// addPods places n pods of a replicated app on h.
func (w *World) addPods(h *Host, n int) {
	for range n {
		w.mu.Lock()
		w.pods++
		id := w.pods
		w.mu.Unlock()
		app := fmt.Sprintf("app-%d", id%max(w.o.Nodes/2, 1))
		w.store.CreatePod(pod(fmt.Sprintf("%s-%d", app, id), app, h.Name))
	}
}

func pod(name, app, node string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: types.UID("rs-" + app), Controller: &yes}},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// budget is each app's PodDisruptionBudget: one pod of it may be away at
// a time.
func (w *World) budget(p *corev1.Pod) error {
	app := p.Labels["app"]
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unavailable[app] >= 1 || time.Now().Before(w.stuck[app]) {
		return apierrors.NewTooManyRequestsError("Cannot evict pod as it would violate the pod's disruption budget.")
	}
	w.unavailable[app]++
	return nil
}

// onEvict is the app's controller: a replacement comes up on another
// schedulable, Ready node a little later.
func (w *World) onEvict(p *corev1.Pod) {
	// An eviction is a disruptive step: the node must hold its slot.
	if n := w.store.Node(p.Spec.NodeName); n == nil || claim.State(n.Labels[claim.Label]) != claim.Holding {
		w.violate("%s evicted pod %s without holding a slot", p.Spec.NodeName, p.Name)
	}
	app := p.Labels["app"]
	w.goSafe(func() {
		if sleep(w.ctx, w.draw(Span{2 * time.Second, 20 * time.Second})) != nil {
			return
		}
		var targets []string
		for _, n := range w.store.Nodes() {
			if !n.Spec.Unschedulable && nodeReady(n) && n.Name != p.Spec.NodeName {
				targets = append(targets, n.Name)
			}
		}
		if len(targets) > 0 {
			w.mu.Lock()
			w.pods++
			id := w.pods
			w.mu.Unlock()
			w.store.CreatePod(pod(fmt.Sprintf("%s-%d", app, id), app, targets[w.intn(len(targets))]))
		}
		w.mu.Lock()
		w.unavailable[app]--
		w.mu.Unlock()
	})
}

// operator is the cluster's admin: a Node whose machine is dead for good
// and whose claim keeps a slot past the alarm age is deleted, as the
// alarm says to do.
func (w *World) operator() {
	for sleep(w.ctx, 5*time.Minute) == nil {
		for _, h := range w.Hosts {
			h.mu.Lock()
			dead := h.dead
			h.mu.Unlock()
			if !dead {
				continue
			}
			n := w.store.Node(h.Name)
			if n == nil || n.Labels[claim.Label] == "" {
				continue
			}
			w.tracef(h.Name, "the operator deletes the Node of the dead machine")
			_ = w.store.DeleteNode(h.Name)
		}
	}
}

// finalChecks runs the checks over the whole history.
func (w *World) finalChecks(done bool) {
	if !done {
		w.violate("not settled within %s: a live node still needs a reboot, or a claim or a cordon is left", w.o.Deadline)
	}
	for _, d := range w.store.Denied() {
		w.violate("the API refused: %s", d)
	}
	// Releases are checked as they happen (checkRelease, which knows who
	// wrote and the true boot), and unplanned reboots are faults: the
	// audit's own release and reboot checks do not apply here.
	h := w.audit()
	seen := map[string]bool{}
	// A machine dead for good keeps its cordon: nothing runs there to
	// undo it, and nothing should be scheduled on it.
	var cordons []audit.Violation
	for _, v := range h.CheckNotLeftCordoned() {
		if d := w.host(v.Node); d == nil || !d.isDead() {
			cordons = append(cordons, v)
		}
	}
	checks := slices.Concat(h.CheckCommits(), h.CheckPublishedLimits(), cordons)
	if !w.o.Mixed && !w.settingsSet.Load() {
		// One configuration: its limits hold at every revision. (The
		// cluster's settings change it mid-roll: the published limits
		// and each commit are checked then.)
		checks = append(checks, h.CheckLimits(w.strictest())...)
	}
	for _, v := range checks {
		// Once per episode: the same excess lasts many revisions.
		if !seen[v.What] {
			seen[v.What] = true
			w.violate("%s", v)
		}
	}
	for _, h := range w.Hosts {
		h.mu.Lock()
		dead, told := h.dead, h.Messages[notify.Reboot]
		h.mu.Unlock()
		if dead {
			continue
		}
		if told < h.Planned {
			// kured's "rebooting" notification comes before each reboot
			// the daemon asks for.
			w.violate("%s rebooted %d time(s) as planned and sent the reboot notification %d time(s)", h.Name, h.Planned, told)
		}
		switch {
		case h.Planned > 1:
			w.violate("%s rebooted %d times for one need", h.Name, h.Planned)
		case h.Planned == 0 && h.Unplanned == 0 && done:
			w.violate("%s never rebooted", h.Name)
		}
	}
}

// audit is the store's history as the audit reads it.
// A claim an admin broke by hand (garbage, a label edited alone) counts
// as holding for the nodes that read it, but is no holder the protocol
// let in: the checks leave it out of their counts (AdminHeld).
func (w *World) audit() audit.History {
	var states []audit.NodeState
	byAdmin := map[string]bool{}
	last := map[string]string{}
	for _, r := range w.store.Revisions() {
		s := audit.StateOf(r.Node, r.RV, r.Deleted, r.At)
		key := s.ClaimLabel + "\x00" + r.Node.Annotations[claim.Annotation]
		if key != last[s.Node] {
			byAdmin[s.Node] = r.By == api.Admin
			last[s.Node] = key
		}
		s.AdminHeld = byAdmin[s.Node] && s.ClaimErr != nil
		states = append(states, s)
	}
	return audit.History{States: states}
}

// strictest is the smallest limit any host's configuration sets: the
// docs promise that no roll-out goes above it.
func (w *World) strictest() claim.Limits {
	var ls []claim.Limits
	for _, h := range w.Hosts {
		ls = append(ls, h.Cfg.Lock.Limits())
	}
	out := claim.Limits{Concurrency: ls[0].Concurrency}
	labels := map[string]bool{}
	for _, l := range ls {
		out.Concurrency = min(out.Concurrency, l.Concurrency)
		for _, g := range l.Groups {
			labels[g.Label] = true
		}
	}
	for _, label := range slices.Sorted(maps.Keys(labels)) {
		if v, i := claim.Strictest(label, ls); i >= 0 {
			out.Groups = append(out.Groups, claim.GroupLimit{Label: label, Max: v})
		}
	}
	return out
}
