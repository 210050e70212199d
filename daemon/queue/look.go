package queue

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The queue is read as metadata (labels and annotations hold the claims):
// a whole Node is several times larger, and every claim change of a queue
// of hundreds reached each node near its front. Metadata has no Ready
// condition, so readiness is read apart, only where it decides something:
// a waiting node ahead that the queue lets go is taken as Ready, and if it
// has not announced within ReadyProbe, its Node is read. A node read
// NotReady is passed over until a read shows it Ready again.
const (
	// ReadyProbe is how long a waiting node ahead may be let go without
	// announcing before its readiness is read: a Ready node's daemon
	// announces within tens of milliseconds, a second under load.
	ReadyProbe = time.Second
	// ReadyReprobe is how often such a node is read again while it still
	// has not announced; a NotReady one, while it waits ahead.
	ReadyReprobe = 5 * time.Second
)

// alarmFront is how many waiting claims ahead of it that it does not pass
// over a node may see and still write alarm Events (reportsAlarms).
const alarmFront = 3

// AlarmSettle is how long after it joined a waiting node waits before it
// writes alarm Events from the front. A join's place in the queue is the
// server's time before its write, and a node shows in the front's watches
// only once it has written its front label: nodes that joined together
// see a front without those whose writes were slower, and more than
// alarmFront of them would each count itself among the first. The settle
// is many times what a join, its read of the queue and its label take on
// a server that answers.
const AlarmSettle = 10 * time.Second

// staleLook is how often a node of the front looks while its watch is
// stale (after an outage, until it has caught up): nothing then wakes it
// when a slot is freed.
const staleLook = 2 * time.Second

// Front is what a waiting node remembers of the others between its looks
// at the queue, and its decisions from each look: when each other node
// became eligible (the grace for silent nodes), the readiness last read of
// each, which alarms it has seen and reported, and the pause. It does no
// I/O and reads no clock; it is safe for concurrent use (the cycle tells
// it of the pause while the lock waits).
type Front struct {
	Node string // this node
	// Grace passes over a waiting node that stays eligible this long
	// without announcing; 0 never does.
	Grace time.Duration
	TTL   time.Duration // claim.EligibilityUpTo's
	// AlarmAge and EnteringAlarmAge are claim.Alarms'.
	AlarmAge, EnteringAlarmAge time.Duration
	// Metadata: the queue is read as metadata, so readiness is read apart
	// (Probe) and what was read is applied (Readiness).
	Metadata bool
	// Jitter returns a duration in [d, 2d).
	Jitter func(time.Duration) time.Duration

	mu      sync.Mutex
	first   map[string]time.Time // when each was first seen eligible
	paused  bool
	resumed time.Time // when this node last saw a pause end
	ready   map[string]readyRead
	alarmed map[string]bool // alarm key -> reported by this node
}

type readyRead struct {
	ready bool
	at    time.Time
}

// SetPaused tells the Front whether the cluster is paused, at now. While
// paused no waiting node is silent: every node is eligible in its turn
// and none announces, and the order must survive the pause. After it,
// silence counts from when this node saw the pause end, so that nodes
// that see it later, within the grace, keep their places.
func (f *Front) SetPaused(paused bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused && !paused {
		f.resumed = now
	}
	f.paused = paused
}

// Silent reports the waiting nodes that have been eligible (as this node
// saw them) for longer than the grace at now without announcing.
func (f *Front) Silent(now time.Time) func(string) bool {
	f.mu.Lock()
	first := maps.Clone(f.first)
	paused, resumed := f.paused, f.resumed
	f.mu.Unlock()
	return func(name string) bool {
		t, ok := first[name]
		if resumed.After(t) {
			t = resumed
		}
		return ok && !paused && name != f.Node && f.Grace > 0 && now.Sub(t) > f.Grace
	}
}

// noteEligible records when each other waiting node became eligible (or
// was passed over for its silence) and has stayed so, and forgets the
// others: a node that was NotReady, or held back by a limit, starts its
// grace afresh once it may go (it was passed over at once, the grace long
// spent, when it came back).
func (f *Front) noteEligible(q claim.Queue, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		f.first = map[string]time.Time{}
	}
	for _, name := range q.Waiting {
		why, skipped := q.Skipped[name]
		if q.Eligible(name) || (skipped && why == claim.SkippedSilent) {
			if f.first[name].IsZero() {
				f.first[name] = now
			}
			continue
		}
		delete(f.first, name)
	}
	maps.DeleteFunc(f.first, func(name string, _ time.Time) bool { return !slices.Contains(q.Waiting, name) })
}

// NoteReady records a read of node name's readiness at at (a Node its
// watch delivered, a read of it; one gone counts as Ready: its claim is
// gone too).
func (f *Front) NoteReady(name string, ready bool, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready == nil {
		f.ready = map[string]readyRead{}
	}
	f.ready[name] = readyRead{ready: ready, at: at}
}

// ReadFailed records a read of name's readiness that failed at at: the
// readiness stays as it was (Ready if unknown), and the next read waits
// ReadyReprobe.
func (f *Front) ReadFailed(name string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready == nil {
		f.ready = map[string]readyRead{}
	}
	r, ok := f.ready[name]
	if !ok {
		r.ready = true
	}
	r.at = at
	f.ready[name] = r
}

// Readiness marks NotReady, in ps, the waiting claims whose daemon marked
// itself stopped, and, when the queue is read as metadata (whole Nodes
// carry their own condition), the other nodes last read NotReady. This
// node's own claim is left as it is.
func (f *Front) Readiness(ps []claim.Participant) []claim.Participant {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range ps {
		if p.Name == f.Node {
			continue
		}
		if Stopped(p) {
			ps[i].Ready = false
		}
		if r, ok := f.ready[p.Name]; ok && f.Metadata && !r.ready {
			ps[i].Ready = false
		}
	}
	return ps
}

// Stopped reports whether p is a waiting claim whose daemon marked it
// stopped: it is passed over as a NotReady one is, at once, until its
// daemon is back and takes the mark off. An active claim with the mark
// counts as any other.
func Stopped(p claim.Participant) bool {
	_, marked := p.Labels[StoppedLabel]
	return marked && p.Err == nil && p.Claim.State == claim.Waiting
}

// probe says whose readiness to read now among the waiting nodes ahead
// of this one in q, and how soon the next read is due (0: none): one the
// queue lets go but that has not announced for ReadyProbe, and again
// every ReadyReprobe while it still has not; one last read NotReady,
// every ReadyReprobe. It forgets the reads of nodes no longer waiting.
func (f *Front) probe(q claim.Queue, now time.Time) (read []string, next time.Duration) {
	if !f.Metadata {
		return nil, 0 // whole Nodes carry their readiness
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	maps.DeleteFunc(f.ready, func(name string, _ readyRead) bool { return !slices.Contains(q.Waiting, name) })
	for _, n := range q.Waiting {
		if n == f.Node {
			break
		}
		r, known := f.ready[n]
		due, ok := probeDue(r, known, q.Eligible(n), f.first[n])
		switch {
		case !ok:
		case due.After(now):
			next = sooner(next, due.Sub(now))
		default:
			read = append(read, n)
			next = sooner(next, ReadyReprobe)
		}
	}
	return read, next
}

// probeDue says whether a waiting node ahead is one to read the readiness
// of, and when: one last read NotReady, ReadyReprobe after that read; one
// the queue lets go since first (zero: not let go), ReadyProbe after
// that, and ReadyReprobe after its last read.
func probeDue(r readyRead, known, eligible bool, first time.Time) (time.Time, bool) {
	switch {
	case known && !r.ready:
		return r.at.Add(ReadyReprobe), true
	case !eligible || first.IsZero():
		return time.Time{}, false
	}
	due := first.Add(ReadyProbe)
	if known && r.at.Add(ReadyReprobe).After(due) {
		due = r.at.Add(ReadyReprobe)
	}
	return due, true
}

// sooner is the sooner of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

// AlarmNews is what one read shows of the alarms: all of them (Current),
// those this node had not seen in its last read (Fresh: it logs them) and
// those it reports now (Raise: an Event each).
type AlarmNews struct {
	Current, Fresh, Raise []claim.Alarm
}

// Alarms takes the alarms of a read of the claims snap at the server's
// time now. An alarm is the same while this node's reads keep showing it;
// one gone from a read that comes back is new (a claim fixed and broken
// again). When this node reports (report), each alarm is raised once: in
// the first read that shows it while it reports, whether it was new then
// or seen from further back.
func (f *Front) Alarms(snap []claim.Participant, now time.Time, report bool) AlarmNews {
	news := AlarmNews{Current: claim.Alarms(snap, now, f.AlarmAge, f.EnteringAlarmAge)}
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range news.Current {
		key := a.Node + "/" + string(a.State) + "/" + strconv.FormatBool(a.Unreadable)
		reported, known := f.alarmed[key]
		if !known {
			news.Fresh = append(news.Fresh, a)
		}
		if report && !reported {
			news.Raise, reported = append(news.Raise, a), true
		}
		seen[key] = reported
	}
	f.alarmed = seen
	return news
}

// reportsAlarms is the rule for which nodes write alarm Events: an
// entering node (verify), and a waiting node at the front of the queue as
// q has it, with fewer than alarmFront waiting claims ahead of it that it
// does not pass over. The Events have names nobody can predict
// (daemon/events), so they cannot be shared: were every node that sees a
// stuck holder to write one, a queue of 500 would write 500. Nodes further
// back in the front log the alarm and count it in the metric, but write
// no Event; nodes behind the front do not see it. Every node of the front
// reads every active claim, so the front always sees the alarms about
// them; claims not passed over are counted so that a front of NotReady or
// silent nodes, whose daemons write nothing, does not keep every node
// from reporting.
func reportsAlarms(q claim.Queue, self string) bool {
	pos := q.Position(self)
	if pos < 0 {
		return false
	}
	ahead := 0
	for _, n := range q.Waiting[:pos] {
		if _, skipped := q.Skipped[n]; !skipped {
			ahead++
		}
	}
	return ahead < alarmFront
}

// View is what a node of the front looks at: its own claim, the claims
// its watches (or a read) show, the time on its clock and on the API
// server's, and whether its watch is stale.
type View struct {
	Self        claim.Participant
	Snap        []claim.Participant // with Self
	Now, Server time.Time
	Stale       bool
}

// Look is a node's decision from one look at the front.
type Look struct {
	Queue    claim.Queue
	Admitted bool
	Alarms   AlarmNews
	// Probe names the nodes ahead whose readiness to read now; when one
	// is read, look again before anything else.
	Probe []string
	// Role is where this node stands (Standing), when not admitted.
	Role   Role
	Ahead  int    // members of its class ahead of it that count
	Reason string // why it waits
	// Wait is how long to wait for a change before looking again.
	Wait time.Duration
}

// Look decides from one look at the front whether this node is admitted,
// and if not, whose readiness to read, where it stands, and how long it
// waits for a change. It notes who is eligible (the grace for silent
// nodes) and the alarms.
func (f *Front) Look(v View) Look {
	q := claim.EligibilityUpTo(v.Snap, v.Server, f.TTL, f.Silent(v.Now), f.Node)
	f.noteEligible(q, v.Now)
	report, reportIn := reportsAlarms(q, f.Node), time.Duration(0)
	if unsettled := AlarmSettle - v.Server.Sub(v.Self.Claim.Since); report && unsettled > 0 {
		report, reportIn = false, unsettled
	}
	look := Look{Queue: q, Alarms: f.Alarms(v.Snap, v.Server, report)}
	if look.Admitted = q.Eligible(f.Node); look.Admitted {
		return look
	}
	var probeIn time.Duration
	look.Probe, probeIn = f.probe(q, v.Now)
	look.Role, look.Ahead = Standing(v.Self, v.Snap, f.counts(q, ClassOf(v.Self), v.Now))
	if look.Reason = q.Blocked[f.Node]; look.Reason == "" {
		look.Reason = "waiting for the nodes ahead"
	}
	look.Wait = f.wait(sooner(probeIn, reportIn), v.Stale)
	return look
}

// wait is how long a node of the front waits for a change before it looks
// again: at least now and then, since the grace for silent nodes and the
// alarms are about time, not changes; when a read of readiness is due or
// it starts to report alarms (due, if positive); and soon while its watch
// is stale, since then nothing wakes it when a slot is freed.
func (f *Front) wait(due time.Duration, stale bool) time.Duration {
	wait := f.Jitter(min(f.Grace/4, 15*time.Second) + time.Second)
	if due > 0 {
		wait = min(wait, due)
	}
	if stale {
		wait = min(wait, f.Jitter(staleLook))
	}
	return wait
}

// counts says which members of class c ahead of this node hold it back:
// the live ones, but not one that q shows blocked only in domains of
// rules c does not name (a rule of another configuration): it keeps no
// member of c behind it out.
// Silence is as noted after this look (Look asks before): a node passed
// over that is now held back by a limit starts its grace again.
func (f *Front) counts(q claim.Queue, c Class, now time.Time) func(claim.Participant) bool {
	silent := f.Silent(now)
	return func(p claim.Participant) bool {
		if !Live(p, silent) {
			return false
		}
		in := q.BlockedIn[p.Name]
		if len(in) == 0 {
			return true
		}
		for _, label := range in {
			if label == "" || c.Names(label) {
				return true
			}
		}
		return false
	}
}
