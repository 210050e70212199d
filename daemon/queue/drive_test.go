package queue

import (
	"cmp"
	"container/heap"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/cycle"
)

// The queue's cores driven from one loop: a roll of many nodes, each
// deciding with its real Follower behind the front and its real Front in
// it, against a world that answers their reads and delivers their
// watches' events, every choice (join times, reply delays, jitter) drawn
// from one seed, the events taken in the order of their time and then of
// their making. Nothing runs concurrently, so a seed gives the same trace
// every time, which TestDriveIsDeterministic checks. A node the Front
// admits announces; its real Entrant decides from each verify, a
// consistent read of the world, whether it commits, stays or steps back.
// The world checks the limits at every commit. A node that holds a slot
// goes through the reboot cycle with the real cycle.Next
// (drive_cycle_test.go) until it releases.

type dMode int8

const (
	dIdle dMode = iota // not yet joined, holding, or done
	dFollow
	dFront
	dEntering // announced: verifying until it commits or steps back
	dWriting  // its commit or step back is on its way
	dDead     // its daemon crashed (drive_cycle_test.go); started again later
)

type dNode struct {
	p       claim.Participant // its claim and labels as the world has them
	h       dHost             // its machine and its daemon's memory
	joined  bool
	silent  bool // its daemon hangs after the join
	done    bool
	mode    dMode
	f       *Follower
	a       FollowAction
	gen     int    // the Follower's request: events of an older one are dropped
	watched string // the node whose watch is open
	front   *Front
	lookGen int  // the Front's timer: one of an older look is dropped
	looking bool // a look is on its way (changes coalesce)
	reads   int  // ReadAhead requests
	looks   int
	enter   *Entrant
	// announced: when its announce landed.
	announced time.Time
	verGen    int // the Entrant's timer: one of an older verify is dropped
	// view is the front and the active claims as its watches show it,
	// from its coming into the front until it holds or follows again;
	// viewAt, when the last change its watches carry arrives.
	view   map[string]claim.Participant
	viewAt time.Time
	// viewGen: the watches' opening; a change an older one carries is
	// dropped.
	viewGen int
	// stale: its watches of the front ended and have not listed again;
	// it reads the front directly (drive_watch_test.go).
	stale bool
	// removed: an admin removed its waiting claim and its daemon does not
	// know yet; mem is the claim as the daemon knows it
	// (drive_admin_test.go).
	removed bool
	mem     claim.Participant
	// held: the operator holds it (drive_hold_test.go).
	held bool
}

type dKind int8

const (
	dJoin dKind = iota
	dFollowEv
	dLook
	dAnnounced // the announce's write lands
	dVerify    // the verify's read, at the moment of the event
	dCommitted // the commit's write lands
	dSteppedBack
	dDelivered // a change the front's watches carry to the node
	// The holder's cycle (drive_cycle_test.go).
	dCycle       // its daemon decides its next step
	dStepDone    // the step's write lands, or its drain ends
	dDown        // the reboot asked for takes the machine down
	dBooted      // the machine is up again, its daemon started
	dReadyAgain  // its kubelet reports the new boot Ready
	dStarted     // its daemon, crashed, is started again
	dCrash       // its daemon crashes while it waits
	dReread      // its daemon, its write's reply lost, has read its claim
	dTick        // the progress check (drive_progress_test.go)
	dWatchEnd    // every watch ends (drive_watch_test.go)
	dRelisted    // a front node's informers list again after their back-off
	dAdminRemove // an admin removes a waiting claim (drive_admin_test.go)
	dPauseEnds   // the operator lifts the pause (drive_pause_test.go)
	dHold        // the operator holds a waiting node (drive_hold_test.go)
	dHoldLifted  // and lifts the hold
)

type dEvent struct {
	at   time.Time
	seq  int
	node int
	kind dKind
	// gen: dFollowEv: the request it answers; dLook: its look's gen (-1:
	// a change); dVerify: its verify's gen; dDelivered: the watches'
	// opening; the host's events: the daemon's.
	gen  int
	wait time.Duration // dSteppedBack: the back-off
	// refused: dSteppedBack: refused at the commit by the operator's
	// pause; it looks again once the pause is lifted.
	refused bool
	step    cycle.Step // dStepDone
	ev      FollowEvent
	p       claim.Participant // dDelivered
}

type dQueue []dEvent

func (q dQueue) Len() int { return len(q) }
func (q dQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q dQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *dQueue) Push(x any)   { *q = append(*q, x.(dEvent)) }
func (q *dQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// dConfig is a roll: nodes in zones, the limits each publishes, how long
// a slot is held.
type dConfig struct {
	nodes, zones, conc, zoneMax int
	hold                        time.Duration
	// silentEvery: every silentEvery-th node joins, then its daemon hangs
	// (0: none): the node behind it finds it at a resync, the front
	// passes it over after the grace. hung names more such nodes.
	silentEvery int
	hung        []int
	// joinEvery, if set, has the nodes join in their order, this far
	// apart; else each at a random time in the first two minutes.
	joinEvery time.Duration
	// deadline ends the roll (6 hours if 0): who is not done by then
	// never will be.
	deadline time.Duration
	// mixed: each node publishes limits of its own, drawn up to conc and
	// zoneMax.
	mixed bool
	// progress: check every second that no waiting node whose daemon
	// runs stays eligible longer than takeBound (no hung daemons).
	progress bool
	// noOtherLimitsWatch: the front's looks do not see the waiting
	// claims that publish other limits (a broken variant of the lock's
	// watches).
	noOtherLimitsWatch bool
	// lag, if set, is the most a look at the front lags (its watches):
	// each look sees the others as they were a time drawn up to lag ago.
	lag time.Duration
	// tamper, if set, changes what each verify read (a broken variant).
	tamper func(name string, v *Verified)
	// faults: holders' daemons crash and machines reboot unplanned
	// (drive_cycle_test.go); every watch ends now and then
	// (drive_watch_test.go).
	faults bool
	// watchEnds: every watch ends now and then, without the other
	// faults.
	watchEnds bool
	// adminRemovals: an admin removes a following node's waiting claim
	// now and then, without the other faults.
	adminRemovals bool
	// noRejoin: a daemon that finds its claim removed does not join
	// again (a broken variant of lock.Acquire's caller).
	noRejoin bool
	// pauses: the operator pauses the roll once, without the other
	// faults (drive_pause_test.go).
	pauses bool
	// holds: the operator holds waiting nodes now and then, without the
	// other faults (drive_hold_test.go).
	holds bool
	// stayWhenHeld: a held node's daemon stops but leaves its claim in
	// the queue (a broken variant of the daemon's leaveQueue).
	stayWhenHeld bool
	// noWakeOnWatchEnd: a front node is not woken when its watches end
	// (a broken variant of the lock's shell).
	noWakeOnWatchEnd bool
	// next, if set, decides the holders' steps in place of cycle.Next
	// (a broken variant).
	next func(cycle.Facts) cycle.Step
}

type dWorld struct {
	cfg    dConfig
	rnd    *rand.Rand
	now    time.Time
	seq    int
	events dQueue
	nodes  []*dNode
	trace  strings.Builder
	broken string
	holds  int // commits
	// stepBacks counts the entering nodes that stepped back: the Front
	// admitted two nodes for one slot, from looks a moment apart.
	stepBacks int
	// unfair counts the commits of a node while a live node of its class
	// that joined before it still waited.
	unfair int
	// frontless counts the nodes that came into the front because no
	// member ahead was in it (at a resync: the ones ahead hang).
	frontless int
	last      time.Time
	pr        progress
	// outFrom, outTo: the API server's outage (faults), if any.
	outFrom, outTo time.Time
	// pauseAfter: the operator pauses the roll at the first announce
	// after it, from pauseFrom to pauseTo (drive_pause_test.go).
	pauseAfter, pauseFrom, pauseTo time.Time
	pauseFor                       time.Duration
}

func newWorld(cfg dConfig, seed uint64) *dWorld {
	w := &dWorld{cfg: cfg, rnd: rand.New(rand.NewPCG(seed, 40)), now: t0}
	jitter := func(d time.Duration) time.Duration { return d + time.Duration(w.rnd.Int64N(int64(d))) }
	for i := range cfg.nodes {
		z := fmt.Sprintf("z%d", i%cfg.zones)
		p := claim.Participant{Name: fmt.Sprintf("n%03d", i), Ready: true, Labels: map[string]string{zone: z}}
		conc, zoneMax := cfg.conc, cfg.zoneMax
		if cfg.mixed {
			conc, zoneMax = 1+w.rnd.IntN(conc), 1+w.rnd.IntN(zoneMax)
		}
		p.Claim = claim.Claim{V: 1, Limits: claim.Limits{Concurrency: conc, Groups: []claim.GroupLimit{{Label: zone, Max: zoneMax}}},
			Groups: map[string]string{zone: z}}
		n := &dNode{p: p, h: dHost{boot: 1, needed: true, up: true, undrained: true}, front: &Front{Node: p.Name, Grace: time.Minute, Jitter: jitter},
			silent: cfg.silentEvery > 0 && i%cfg.silentEvery == cfg.silentEvery-1 || slices.Contains(cfg.hung, i)}
		w.nodes = append(w.nodes, n)
		// Every node learns of the update within two minutes, and
		// paces its join.
		join := t0.Add(time.Duration(i) * cfg.joinEvery)
		if cfg.joinEvery == 0 {
			join = t0.Add(time.Duration(w.rnd.Int64N(int64(2*time.Minute))) + JoinDelay(cfg.nodes, w.rnd.Int64N))
		}
		w.at(join, dEvent{node: i, kind: dJoin})
	}
	if cfg.progress {
		w.at(t0.Add(time.Second), dEvent{kind: dTick})
	}
	if cfg.faults && w.rnd.IntN(3) == 0 {
		w.outFrom = t0.Add(time.Duration(w.rnd.Int64N(int64(30 * time.Minute))))
		w.outTo = w.outFrom.Add(30*time.Second + time.Duration(w.rnd.Int64N(int64(150*time.Second))))
	}
	w.drawWatchEnds()
	w.drawAdminRemovals()
	w.drawPause()
	w.drawHolds()
	return w
}

// drawTimes schedules lo to hi events of kind, at times drawn in the
// roll's first within: the faults that are the world's, not a node's.
func (w *dWorld) drawTimes(kind dKind, lo, hi int, within time.Duration) {
	for range lo + w.rnd.IntN(hi-lo+1) {
		w.at(t0.Add(time.Duration(w.rnd.Int64N(int64(within)))), dEvent{kind: kind})
	}
}

func (w *dWorld) at(t time.Time, e dEvent) {
	e.at, e.seq = t, w.seq
	w.seq++
	heap.Push(&w.events, e)
}

// reply is when an answer made now arrives: a few milliseconds.
// During an outage of the API server (faults) nothing is answered: each
// answer comes once it is over, its clients retrying.
func (w *dWorld) reply() time.Time {
	at := w.now
	if !at.Before(w.outFrom) && at.Before(w.outTo) {
		at = w.outTo
	}
	return at.Add(5*time.Millisecond + time.Duration(w.rnd.Int64N(int64(20*time.Millisecond))))
}

func (w *dWorld) logf(format string, args ...any) {
	fmt.Fprintf(&w.trace, "%9.3f ", w.now.Sub(t0).Seconds())
	fmt.Fprintf(&w.trace, format, args...)
	w.trace.WriteByte('\n')
}

func (w *dWorld) index(name string) int {
	var i int
	fmt.Sscanf(name, "n%03d", &i)
	return i
}

// run takes the events in order until none is left or the deadline.
func (w *dWorld) run(deadline time.Duration) {
	for w.events.Len() > 0 && w.broken == "" {
		e := heap.Pop(&w.events).(dEvent)
		if e.at.Sub(t0) > deadline {
			return // drive says who is not done
		}
		w.now = e.at
		n := w.nodes[e.node]
		switch e.kind {
		case dJoin:
			if n.held {
				continue // the lifted hold joins it
			}
			n.joined = true
			n.p.Claim.State, n.p.Claim.Since = claim.Waiting, w.now
			w.logf("%s joins", n.p.Name)
			if !n.silent {
				w.follow(e.node, time.Time{})
				w.crashWhileWaiting(e.node)
			}
		case dFollowEv:
			// A watch's events are for whoever still watches that node;
			// a reply or a timer, for the request that asked for it.
			if n.mode != dFollow || (e.ev.Kind != Changed && e.gen != n.gen) {
				continue
			}
			if e.ev.Kind == Changed && (n.a.Kind != WatchPred || n.watched != e.ev.Pred.Name) {
				continue
			}
			if e.ev.Kind == Rechecked && e.ev.Self.Claim.State != claim.Waiting {
				w.lost(e.node, "at its resync")
				continue
			}
			e.ev.Now = w.now
			w.request(e.node, n.f.Step(e.ev))
		case dLook:
			if e.gen < 0 {
				// A change's look: one is pending no more, even when
				// this one is dropped (the node left the front since).
				n.looking = false
			}
			if n.mode != dFront || (e.gen >= 0 && e.gen != n.lookGen) {
				continue
			}
			w.look(e.node)
		case dAnnounced, dVerify, dCommitted, dSteppedBack:
			w.entering(e)
		case dDelivered:
			if n.view == nil || e.gen != n.viewGen {
				continue // for a watch since closed
			}
			if e.p.Claim.State == "" {
				delete(n.view, e.p.Name)
			} else {
				n.view[e.p.Name] = e.p
			}
			switch n.mode {
			case dFront:
				w.lookSoon(e.node)
			case dEntering:
				// Staying: a change of the claims it reads brings its
				// next verify forward (the real one waits for a change).
				w.verifySoon(e.node, w.reply())
			}
		case dTick:
			w.tick()
		case dWatchEnd:
			w.watchesEnd()
		case dRelisted:
			w.relisted(e)
		case dAdminRemove:
			w.adminRemove()
		case dPauseEnds:
			w.tellPaused(false)
		case dHold:
			w.hold()
		case dHoldLifted:
			w.liftHold(e.node)
		case dCycle, dStepDone, dDown, dBooted, dReadyAgain, dStarted, dCrash, dReread:
			w.hostEvent(e)
		}
	}
}

func (w *dWorld) follow(i int, notBefore time.Time) {
	n := w.nodes[i]
	n.mode, n.watched, n.view = dFollow, "", nil
	n.f = NewFollower(w.self(i), notBefore, n.front.Jitter)
	w.request(i, n.f.Start())
}

// request does what the Follower asks.
func (w *dWorld) request(i int, a FollowAction) {
	n := w.nodes[i]
	n.a = a
	n.gen++
	if a.Kind != WatchPred {
		n.watched = ""
	}
	switch a.Kind {
	case ReadAhead:
		n.reads++
		w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: FollowEvent{Kind: Found, Read: w.readAhead(a.Of, a.Span)}})
	case ReadFront:
		n.reads++
		w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: FollowEvent{Kind: Found, Read: w.readFront(a.Of)}})
	case RecheckOwn:
		w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: FollowEvent{Kind: Rechecked, Self: w.copyOf(n.p)}})
	case WatchPred:
		if n.watched != a.Pred {
			n.watched = a.Pred
			w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: w.changeOf(w.index(a.Pred))})
		}
		w.at(a.Wake, dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: FollowEvent{Kind: Woke}})
	case EnterFront:
		w.logf("%s comes into the front: %s", n.p.Name, a.Why)
		if strings.HasPrefix(a.Why, "no node of its class") {
			w.frontless++
		}
		n.mode = dFront
		w.watchFront(i)
		w.lookSoon(i)
	}
}

// changeOf is node j as its watch delivers it.
func (w *dWorld) changeOf(j int) FollowEvent {
	m := w.nodes[j]
	if m.p.Claim.State == "" {
		return FollowEvent{Kind: Changed, Pred: claim.Participant{Name: m.p.Name}, Left: true}
	}
	return FollowEvent{Kind: Changed, Pred: w.copyOf(m.p)}
}

func (w *dWorld) copyOf(p claim.Participant) claim.Participant {
	l := make(map[string]string, len(p.Labels))
	for k, v := range p.Labels {
		l[k] = v
	}
	p.Labels = l
	return p
}

// readAhead is a read of the waiting members of of's class in its
// span-th span.
func (w *dWorld) readAhead(of claim.Participant, span int) []claim.Participant {
	var out []claim.Participant
	c := ClassOf(of)
	for _, m := range w.nodes {
		if m.p.Claim.State != claim.Waiting || !ClassOf(m.p).Equal(c) {
			continue
		}
		ahead := of.Claim.Since.Sub(m.p.Claim.Since)
		if ahead >= 0 && (span >= len(spans) || ahead < spans[span]) {
			out = append(out, w.copyOf(m.p))
		}
	}
	return out
}

// readFront is a read of the waiting members of of's class with a front
// label.
func (w *dWorld) readFront(of claim.Participant) []claim.Participant {
	var out []claim.Participant
	c := ClassOf(of)
	for _, m := range w.nodes {
		if _, front := m.p.Labels[FrontLabel]; front && m.p.Claim.State == claim.Waiting && ClassOf(m.p).Equal(c) {
			out = append(out, w.copyOf(m.p))
		}
	}
	return out
}

func (w *dWorld) lookSoon(i int) {
	n := w.nodes[i]
	if !n.looking {
		n.looking = true
		w.at(w.reply(), dEvent{node: i, kind: dLook, gen: -1})
	}
}

// look is one look of node i at the front, as its watches show it (the
// lock's three informers): the nodes with a front label, every active
// claim, the waiting claims that publish other limits than its own, and
// itself.
func (w *dWorld) look(i int) {
	n := w.nodes[i]
	stale := n.stale && n.view != nil
	if stale && w.serverDown() {
		// The direct read fails until the server is back; the cycle
		// tries again within 6 s.
		n.lookGen++
		w.at(w.outTo.Add(time.Duration(w.rnd.Int64N(int64(6*time.Second)))), dEvent{node: i, kind: dLook, gen: n.lookGen})
		return
	}
	n.looks++
	self := w.self(i)
	snap := []claim.Participant{self}
	for j := range w.nodes {
		p, ok := n.view[w.nodes[j].p.Name]
		if stale {
			p, ok = w.nodes[j].p, w.nodes[j].p.Claim.State != ""
		}
		_, front := p.Labels[FrontLabel]
		other := p.Claim.State == claim.Waiting && !w.cfg.noOtherLimitsWatch && otherLimits(p, self)
		if j != i && ok && (front || p.Claim.State.Active() || other) {
			snap = append(snap, w.copyOf(p))
		}
	}
	look := n.front.Look(View{Self: self, Snap: snap, Now: w.now, Server: w.now, Stale: stale})
	if look.Admitted && w.paused() {
		w.waitLifted(i) // MayAnnounce refuses: no write, its place kept
		return
	}
	if n.removed && (look.Admitted || RoleOf(self.Labels) != look.Role) {
		w.lost(i, "as its write is refused") // its announce, or its front label
		return
	}
	if look.Admitted {
		w.admit(i)
		return
	}
	if RoleOf(n.p.Labels) != look.Role {
		w.logf("%s is %q in the front (%d ahead)", n.p.Name, look.Role, look.Ahead)
		if look.Role == RoleBehind {
			delete(n.p.Labels, FrontLabel)
		} else {
			n.p.Labels[FrontLabel] = string(look.Role)
		}
		w.changed(i)
	}
	if look.Role == RoleBehind {
		w.follow(i, w.now.Add(5*time.Second))
		return
	}
	n.lookGen++
	w.at(w.now.Add(look.Wait), dEvent{node: i, kind: dLook, gen: n.lookGen})
}

// admit: the Front admitted node i; it announces (its label in).
func (w *dWorld) admit(i int) {
	n := w.nodes[i]
	n.mode = dEntering
	if n.enter == nil {
		n.enter = NewEntrant(n.p.Name)
	}
	w.at(w.reply(), dEvent{node: i, kind: dAnnounced, gen: n.h.gen})
}

// entering runs node i's announce, verifies, commit and step back, the
// Entrant deciding from each verify's read.
func (w *dWorld) entering(e dEvent) {
	i := e.node
	n := w.nodes[i]
	switch e.kind {
	case dAnnounced:
		n.p.Claim.State, n.p.Labels[FrontLabel] = claim.Entering, string(RoleIn)
		n.announced = w.now
		w.logf("%s announces", n.p.Name)
		w.pauseAt()
		w.changed(i)
		if w.replied(e) {
			w.verifySoon(i, w.reply())
			w.crashWhileEntering(i)
		}
	case dVerify:
		if n.mode != dEntering || n.p.Claim.State != claim.Entering || e.gen != n.verGen {
			return
		}
		a := n.enter.Verified(w.verified(i))
		if a.Move == EnterCommit && w.paused() {
			a = n.enter.Checked(errPaused) // Take.Check, right before the commit
		}
		if a.Move == EnterCommit || a.Move == EnterStepBack || a.Move == EnterRefuse {
			n.mode = dWriting
		}
		switch a.Move {
		case EnterCommit:
			w.at(w.reply(), dEvent{node: i, kind: dCommitted, gen: n.h.gen})
		case EnterStepBack:
			w.logf("%s steps back: %s", n.p.Name, a.Reason)
			w.at(w.reply(), dEvent{node: i, kind: dSteppedBack, wait: a.Wait, gen: n.h.gen})
		case EnterRefuse:
			w.logf("%s is refused at its commit and steps back: %s", n.p.Name, a.Reason)
			w.at(w.reply(), dEvent{node: i, kind: dSteppedBack, refused: true, gen: n.h.gen})
		case EnterStay:
			w.verifySoon(i, w.now.Add(n.front.Jitter(a.Wait)))
		default:
			w.broken = fmt.Sprintf("%s: %s, from a read of its own claim", n.p.Name, a.Move)
		}
	case dCommitted:
		w.commit(i, w.replied(e))
	case dSteppedBack:
		// Back in the front after the back-off.
		n.p.Claim.State = claim.Waiting
		w.stepBacks++
		w.changed(i)
		if !w.replied(e) {
			return // its write landed; the daemon decides from a read
		}
		n.mode = dFront
		n.enter.Waiting()
		if e.refused {
			w.waitLifted(i)
			return
		}
		n.lookGen++
		w.at(w.now.Add(n.front.Jitter(max(e.wait, 1))), dEvent{node: i, kind: dLook, gen: n.lookGen})
	}
}

// verifySoon has node i verify at t, or at a change of the claims it
// reads, whichever comes first (a change while it stays).
func (w *dWorld) verifySoon(i int, t time.Time) {
	n := w.nodes[i]
	n.verGen++
	w.at(t, dEvent{node: i, kind: dVerify, gen: n.verGen})
}

// verified is node i's verify: a consistent read of every active claim,
// of the waiting claims that publish other limits than its own, and of
// the waiting members of the front, now.
func (w *dWorld) verified(i int) Verified {
	n := w.nodes[i]
	var snap []claim.Participant
	for j, m := range w.nodes {
		_, front := m.p.Labels[FrontLabel]
		waiting := m.p.Claim.State == claim.Waiting
		if j == i || m.p.Claim.State.Active() || waiting && (front || otherLimits(m.p, n.p)) {
			snap = append(snap, w.copyOf(m.p))
		}
	}
	v := Verified{Now: w.now, Server: w.now, Announced: true, Whole: true, Own: n.p.Claim.Limits, Snap: snap,
		Silent: n.front.Silent(w.now)}
	if w.cfg.tamper != nil {
		w.cfg.tamper(n.p.Name, &v)
	}
	return v
}

// commit gives node i its slot and checks the limits; replied: its
// daemon got the reply and goes on with the cycle.
func (w *dWorld) commit(i int, replied bool) {
	n := w.nodes[i]
	acquired := w.now
	n.p.Claim.State, n.p.Claim.Acquired, n.p.Claim.BootID = claim.Holding, &acquired, bootName(n.h.boot)
	n.p.Claim.Phase = claim.PhaseCordoned // the commit cordons (lock.commit)
	n.h.mark, n.h.unsched = true, true
	n.mode, n.view = dIdle, nil
	w.holds++
	w.logf("%s takes a slot", n.p.Name)
	total, zones := 0, map[string]int{}
	for _, m := range w.nodes {
		if m.p.Claim.State == claim.Holding {
			total++
			zones[m.p.Labels[zone]]++
		}
	}
	// Fairness: within its class, a node takes its slot after every live
	// node that joined before it (docs/claims.md, the queue's order).
	for _, m := range w.nodes {
		if m != n && !m.silent && m.h.crashes == 0 && m.p.Claim.State == claim.Waiting && ClassOf(m.p).Equal(ClassOf(n.p)) && claim.QueueOrder(m.p, n.p) < 0 {
			w.unfair++
			w.logf("%s took a slot before %s, ahead of it in its class", n.p.Name, m.p.Name)
			break
		}
	}
	conc, zoneMax := w.strictest(n)
	if total > conc || zones[n.p.Labels[zone]] > zoneMax {
		w.broken = fmt.Sprintf("%s took a slot beyond the limits (%d, %d a zone): %d held, %d in its zone", n.p.Name, conc, zoneMax, total, zones[n.p.Labels[zone]])
	}
	w.changed(i)
	if replied {
		w.startCycle(i)
	}
}

// otherLimits: p publishes other limits than self, as the lock's
// selector of them tells (their digests differ). The same limits have
// the same digest: most pairs need no digest, which costs a JSON encoding.
func otherLimits(p, self claim.Participant) bool {
	a, b := p.Claim.Limits, self.Claim.Limits
	if a.Concurrency == b.Concurrency && slices.Equal(a.Groups, b.Groups) {
		return false
	}
	return claim.LimitsDigest(a) != claim.LimitsDigest(b)
}

// strictest are the limits node n's commit must keep: the smallest that
// any claim there from before its announce publishes, a zone's limit
// from the claims in n's zone (audit.CheckCommits).
func (w *dWorld) strictest(n *dNode) (conc, zoneMax int) {
	var all, in []claim.Limits
	for _, m := range w.nodes {
		if m == n || m.p.Claim.State != "" && !m.p.Claim.Since.After(n.announced) {
			all = append(all, m.p.Claim.Limits)
			if m.p.Labels[zone] == n.p.Labels[zone] {
				in = append(in, m.p.Claim.Limits)
			}
		}
	}
	conc, _ = claim.Strictest("", all)
	zoneMax, _ = claim.Strictest(zone, in)
	return conc, zoneMax
}

// watchFront starts node i's watches of the front: they list it first.
func (w *dWorld) watchFront(i int) {
	n := w.nodes[i]
	if n.view != nil {
		return
	}
	n.view, n.viewAt, n.stale = map[string]claim.Participant{}, w.now, false
	n.viewGen++
	for _, m := range w.nodes {
		if m.p.Claim.State != "" {
			n.view[m.p.Name] = w.copyOf(m.p)
		}
	}
}

// deliver is node i's watches carrying a change of p: in order, each a
// time drawn up to the lag after the change.
func (w *dWorld) deliver(i int, p claim.Participant) {
	n := w.nodes[i]
	if n.stale {
		return // no stream open: the informers' next List shows it
	}
	t := w.reply()
	if w.cfg.lag > 0 {
		t = t.Add(time.Duration(w.rnd.Int64N(int64(w.cfg.lag))))
	}
	if t.Before(n.viewAt) {
		t = n.viewAt
	}
	n.viewAt = t
	w.at(t, dEvent{node: i, kind: dDelivered, p: p, gen: n.viewGen})
}

// changed delivers a change of node j: to the nodes watching it, and to
// the nodes of the front when it is in the front's view.
func (w *dWorld) changed(j int) {
	for i, n := range w.nodes {
		switch {
		case i == j:
		case n.mode == dFollow && n.a.Kind == WatchPred && n.watched == w.nodes[j].p.Name:
			w.at(w.reply(), dEvent{node: i, kind: dFollowEv, gen: n.gen, ev: w.changeOf(j)})
		case n.view != nil:
			w.deliver(i, w.copyOf(w.nodes[j].p))
		}
	}
}

// skipUnderRace leaves the drive's rolls to make sim under -race
// (underRace).
func skipUnderRace(t *testing.T) {
	if underRace {
		t.Skip("one goroutine, nothing for the race detector: make sim runs it")
	}
}

// drive runs a roll and says what broke, with the trace.
func drive(cfg dConfig, seed uint64) *dWorld {
	w := newWorld(cfg, seed)
	w.run(cmp.Or(cfg.deadline, 6*time.Hour))
	if w.broken == "" {
		for _, n := range w.nodes {
			if !n.done && !n.silent {
				w.broken = fmt.Sprintf("%s never rebooted and released (mode %d, request %s, claim %+v)", n.p.Name, n.mode, show(n.a), n.p.Claim)
				break
			}
		}
	}
	return w
}

// TestDrive: rolls of 60 nodes in three zones, each driven to its end
// by the real cores, within the limits, every node rebooted, in a time
// near the ideal, each node reading its class a few times only, and
// within each class in the order of the joins (no daemon hangs here: a
// node behind a hung one waits for its resync, and the nodes behind
// other hung ones may come in before it).
func TestDrive(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: time.Second, progress: true}
	for seed := range uint64(20) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		// Two slots at a time (concurrency 2), each cycle within 30 s,
		// after the joins of two minutes at most.
		ideal := 2*time.Minute + JoinSpread(cfg.nodes) + time.Duration(cfg.nodes/cfg.conc)*cfg.hold
		reads, looks := 0, 0
		for _, n := range w.nodes {
			reads, looks = max(reads, n.reads), max(looks, n.looks)
		}
		if seed == 0 {
			t.Logf("seed 0: done at %v (%.2f of the bound %v); at most %d reads ahead and %d looks a node; %d step backs", w.last.Sub(t0).Round(time.Second),
				float64(w.last.Sub(t0))/float64(ideal), ideal, reads, looks, w.stepBacks)
		}
		if w.last.Sub(t0) > ideal {
			t.Errorf("seed %d: done at %v, after the bound %v", seed, w.last.Sub(t0), ideal)
		}
		if w.unfair > 0 {
			t.Errorf("seed %d: %d slots taken while a node ahead in the class waited\n%s", seed, w.unfair, w.trace.String())
		}
	}
}

// TestDriveSilent: rolls where every seventh node's daemon hangs after
// its join, two or three in a row at times. The nodes behind hung ones
// find at a resync that no member of their class ahead of them is in the
// front, and enter; the front passes the hung ones over after the grace.
// Every other node reboots, within the limits.
func TestDriveSilent(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, silentEvery: 7, lag: time.Second}
	for seed := range uint64(10) {
		w := drive(cfg, seed)
		if w.broken != "" {
			t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
		}
		if seed == 0 {
			t.Logf("seed 0: done at %v, %d nodes came in at a resync, %d step backs, %d slots taken out of the class's order", w.last.Sub(t0).Round(time.Second), w.frontless, w.stepBacks, w.unfair)
		}
	}
}

// TestDriveHungHead: one class, one slot, nodes joining in order, the
// first (or the first two) hung. The first node behind them waits for a
// resync (20 minutes at most) and enters; from then on each node comes
// in as soon as the one ahead of it takes its slot from the front, not at
// its own resync: the roll ends within that resync and one slot per node.
// A hung node further back (the sixth) costs the node behind it its first
// resync too, and, when that resync still finds live members of the front
// ahead of it (in 10 of 100 seeds), the next one, doubled: 60 minutes at
// most (docs/claims.md, "Dead, stopped and NotReady members").
func TestDriveHungHead(t *testing.T) {
	skipUnderRace(t)
	for _, tc := range []struct {
		hung    []int
		resyncs time.Duration // the most the hung ones can cost, in resync periods
	}{
		{[]int{0}, 2},
		{[]int{0, 1}, 2},
		{[]int{0, 1, 5}, 6},
	} {
		t.Run(fmt.Sprint("hung ", tc.hung), func(t *testing.T) {
			cfg := dConfig{nodes: 20, zones: 1, conc: 1, zoneMax: 1, hold: 30 * time.Second, hung: tc.hung, joinEvery: time.Second}
			bound := tc.resyncs*ResyncEvery + time.Duration(cfg.nodes-len(tc.hung))*cfg.hold + time.Minute
			var longest time.Duration
			for seed := range uint64(100) {
				w := drive(cfg, seed)
				if w.broken != "" {
					t.Fatalf("seed %d: %s\n%s", seed, w.broken, w.trace.String())
				}
				took := w.last.Sub(t0)
				longest = max(longest, took)
				if took > bound {
					t.Errorf("seed %d: done at %v, after %v", seed, took.Round(time.Second), bound)
				}
			}
			t.Logf("100 seeds: done at %v at the latest (bound %v)", longest.Round(time.Second), bound)
		})
	}
}

// TestDriveFindsBrokenVerify: the Front may admit a node from a view
// that lags (each node passes a hung one over when its own grace ends,
// and its watches lag up to 5 s); the verify's consistent read is what
// keeps the limits then. With a verify that does not count the holders,
// such a node commits beyond the limits, and the world's check says so.
func TestDriveFindsBrokenVerify(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 60, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, lag: 5 * time.Second, silentEvery: 7,
		tamper: func(name string, v *Verified) {
			v.Snap = slices.DeleteFunc(v.Snap, func(p claim.Participant) bool { return p.Claim.State == claim.Holding })
		}}
	for seed := range uint64(20) {
		if w := drive(cfg, seed); strings.Contains(w.broken, "beyond the limits") {
			t.Logf("seed %d: %s", seed, w.broken)
			return
		}
	}
	t.Fatal("no seed of 20 found it")
}

// TestDriveIsDeterministic: each seed, run twice (hung daemons, holders
// that crash and machines that reboot unplanned), gives the same trace,
// byte for byte.
func TestDriveIsDeterministic(t *testing.T) {
	skipUnderRace(t)
	cfg := dConfig{nodes: 30, zones: 3, conc: 2, zoneMax: 1, hold: 30 * time.Second, silentEvery: 7, lag: time.Second, faults: true}
	sum := func(s string) uint64 { h := fnv.New64a(); h.Write([]byte(s)); return h.Sum64() }
	for seed := range uint64(100) {
		a, b := drive(cfg, seed), drive(cfg, seed)
		if a.trace.String() != b.trace.String() {
			t.Fatalf("seed %d: two runs differ (%x, %x)", seed, sum(a.trace.String()), sum(b.trace.String()))
		}
	}
}
