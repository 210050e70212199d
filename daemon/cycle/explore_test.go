package cycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// The cycle's explorer: one node's daemon deciding each step with the real
// Next, against every interleaving of its own crashes (after any write of
// a step), an unplanned reboot, an admin's removal of its claim and an
// admin's cordon, a drain that fails or a blocker found at the cordon,
// each at any moment. The steps' writes are the daemon's (daemon/*.go), as
// atomic operations on the Node and its claim; the lock is one atomic
// acquisition. It checks, in every state reached, the cycle's promises
// (docs/claims.md, "Safety is the product"): a slot released as done only
// after a reboot (the boot changed since the slot was taken); a reboot
// asked for only by the holder, drained; evictions only from a cordoned
// node; no join while kured-host's
// cordon of an earlier slot is still on; and, whenever the node is at
// rest, no cordon of kured-host's left on it.

// cWorld is the Node, its claim, the host and the daemon's memory;
// comparable, so it keys the visited set.
type cWorld struct {
	// The claim, as the API server has it.
	state claim.State
	phase claim.Phase
	// claimBoot: the boot the claim records, the one the slot was taken
	// in: the commit's, rewritten with the same boot by the reboot's
	// record; an unplanned reboot never rewrites it.
	claimBoot int8
	acquired  int8 // which acquisition this claim is (0: none)
	cordoned  bool // the claim says kured-host cordoned
	// The Node.
	mark        bool // kured-host's cordon annotation
	unsched     bool
	adminCordon bool // an admin cordoned it (kured-host must leave that)
	// The host.
	boot      int8
	needed    bool
	undrained bool // pods that must be evicted before a reboot
	pending   bool // a reboot was asked for; the machine goes down next
	// The daemon's memory, lost in a crash or a reboot.
	took       int8 // Facts.Took: the acquisition this process holds
	drainedFor int8 // Facts.Drained: the acquisition it drained for
	// The faults used, each at most once, and the acquisitions made.
	acquisitions                                                      int8
	crashed, rebooted, removed, cordonedByAdmin, blocked, drainFailed bool
}

var cT0 = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)

func cTime(n int8) *time.Time {
	if n == 0 {
		return nil
	}
	t := cT0.Add(time.Duration(n) * time.Minute)
	return &t
}

// facts are what the daemon gathers (daemon.facts).
func (w cWorld) facts() Facts {
	f := Facts{State: w.state, CordonMark: w.mark, NotNeeded: !w.needed}
	if w.state != "" {
		f.Claim = claim.Claim{State: w.state, Phase: w.phase, BootID: fmt.Sprint("b", w.claimBoot), Acquired: cTime(w.acquired)}
	}
	if w.took != 0 {
		f.Took = cTime(w.took)
	}
	if w.drainedFor != 0 && w.drainedFor == w.acquired {
		f.Drained = true
	}
	if w.state == claim.Holding {
		f.Boot = fmt.Sprint("b", w.boot)
	}
	return f
}

// op is one atomic write or act of a step; ok false: it could not be
// made (a conditional write on a claim that is gone), and the step ends.
type op struct {
	what string
	do   func(w *cWorld) (ok bool, bad string)
}

// Ops shared by steps.
var (
	release = op{"release", func(w *cWorld) (bool, string) {
		if w.state == "" {
			return false, ""
		}
		bad := ""
		if w.state == claim.Holding && w.phase != claim.PhaseAborted && w.boot <= w.claimBoot {
			bad = "released as done in the boot the slot was taken in"
		}
		w.state, w.phase, w.acquired, w.cordoned, w.claimBoot = "", "", 0, false, 0
		w.took = 0
		return true, bad
	}}
	uncordon = op{"uncordon", func(w *cWorld) (bool, string) {
		w.mark, w.unsched = false, w.adminCordon
		if !w.unsched {
			w.undrained = true // pods come back once it is schedulable
		}
		return true, ""
	}}
)

func setPhase(p claim.Phase) op {
	return op{"record " + string(p), func(w *cWorld) (bool, string) {
		if w.state != claim.Holding || w.acquired != w.heldBy() {
			return false, ""
		}
		w.phase = p
		return true, ""
	}}
}

// heldBy is the acquisition the daemon's writes are conditional on: the
// one it took, or the one it last read when it took none.
func (w *cWorld) heldBy() int8 {
	if w.took != 0 {
		return w.took
	}
	return w.acquired
}

// abortOps: finishAbort records the abort, then uncordons, then releases
// (uncordonFirst: the broken order, for the test that it is found).
func abortOps(w cWorld) []op {
	var ops []op
	if w.phase != claim.PhaseAborted {
		ops = append(ops, setPhase(claim.PhaseAborted))
	}
	if w.cordoned || w.mark {
		if uncordonFirst {
			ops = append([]op{uncordon}, ops...)
		} else {
			ops = append(ops, uncordon)
		}
	}
	return append(ops, release)
}

var uncordonFirst bool

// stepOps are the writes step s makes from w (daemon/*.go), in order;
// branches are the outcomes it may meet (a blocker, a failed drain).
func stepOps(s Step, w cWorld) [][]op {
	switch s {
	case Idle:
		if !w.needed || w.acquisitions >= 2 {
			return nil
		}
		return [][]op{{{"join", func(w *cWorld) (bool, string) {
			w.state = claim.Waiting
			if w.mark {
				// A node waits for its turn in service: the cordon of a
				// slot it no longer holds is undone first.
				return true, "joined the queue still cordoned by kured-host"
			}
			return true, ""
		}}}}
	case LeaveQueue:
		return [][]op{{release}}
	case Acquire:
		// The commit takes the slot and cordons in one write (lock.Take).
		take := op{"take a slot, cordoned in the same write", func(w *cWorld) (bool, string) {
			if w.state == "" {
				return false, ""
			}
			w.acquisitions++
			w.state, w.phase, w.acquired, w.claimBoot = claim.Holding, claim.PhaseDraining, w.acquisitions, w.boot
			w.cordoned, w.mark = !w.unsched, w.mark || !w.unsched
			w.unsched = true
			return true, ""
		}}
		out := [][]op{{take}}
		if !w.blocked {
			blocked := op{"blocked at the last look before the announce", func(w *cWorld) (bool, string) { w.blocked = true; return true, "" }}
			out = append(out, []op{blocked, release})
			// The look while waiting decides to leave as the commit lands:
			// the slot is given back through the abort's step.
			out = append(out, []op{blocked, take, setPhase(claim.PhaseAborted)})
		}
		return out
	case Cordon:
		cordon := op{"record the cordon, cordoned", func(w *cWorld) (bool, string) {
			if w.state != claim.Holding || w.acquired != w.heldBy() {
				return false, ""
			}
			w.phase, w.cordoned = claim.PhaseDraining, !w.unsched
			w.mark = w.mark || !w.unsched
			w.unsched = true
			return true, ""
		}}
		out := [][]op{{cordon}}
		if !w.blocked {
			out = append(out, append([]op{{"blocked: give back", func(w *cWorld) (bool, string) { w.blocked = true; return true, "" }}}, abortOps(w)...))
		}
		return out
	case StartDrain:
		return [][]op{{setPhase(claim.PhaseDraining)}}
	case Drain:
		evict := op{"evict (each eviction confirmed)", func(w *cWorld) (bool, string) {
			if w.state != claim.Holding || w.acquired != w.heldBy() {
				return false, ""
			}
			w.undrained, w.drainedFor = false, w.acquired
			if !w.unsched {
				return true, "evicting from a schedulable node"
			}
			return true, ""
		}}
		out := [][]op{{evict}}
		if !w.drainFailed {
			out = append(out, append([]op{{"the drain fails", func(w *cWorld) (bool, string) { w.drainFailed = true; return true, "" }}}, abortOps(w)...))
		}
		return out
	case RequestReboot:
		record := op{"record rebooting", func(w *cWorld) (bool, string) {
			if w.state != claim.Holding || w.acquired != w.heldBy() {
				return false, ""
			}
			w.phase, w.claimBoot = claim.PhaseRebooting, w.boot
			return true, ""
		}}
		ask := op{"ask logind to reboot", func(w *cWorld) (bool, string) {
			w.pending = true
			switch {
			case w.state != claim.Holding:
				return true, "reboot asked for without a slot"
			case w.undrained:
				return true, "reboot asked for undrained"
			}
			return true, ""
		}}
		return [][]op{{record, ask}}
	case FinishAbort, GiveBack:
		return [][]op{abortOps(w)}
	case Lost:
		if w.state == claim.Holding {
			return [][]op{abortOps(w)}
		}
		if w.cordoned || w.mark {
			return [][]op{{uncordon, forget}}
		}
		return [][]op{{forget}}
	case UncordonOrphan:
		return [][]op{{uncordon}}
	case RecordBack:
		return [][]op{{setPhase(claim.PhaseRebooted)}}
	case Resume:
		if w.phase == claim.PhaseRebooted && (w.cordoned || w.mark) {
			return [][]op{{{"release and uncordon in one write", func(w *cWorld) (bool, string) {
				if w.state == "" {
					return false, ""
				}
				ok, bad := release.do(w)
				uncordon.do(w)
				return ok, bad
			}}}}
		}
		return [][]op{{release}}
	}
	return nil
}

// forget: the lost path ends by reading the claim again, holding nothing.
var forget = op{"start over", func(w *cWorld) (bool, string) { w.took = 0; return true, "" }}

type cMove struct {
	what string
	to   cWorld
	bad  string
}

func (w cWorld) moves(next func(Facts) Step) []cMove {
	var out []cMove
	if w.pending {
		// The machine goes down: a new boot, the daemon starts afresh,
		// the sentinel is gone.
		t := w
		t.boot++
		t.pending, t.needed, t.took, t.drainedFor = false, false, 0, 0
		return []cMove{{what: "the machine reboots", to: t}}
	}
	s := next(w.facts())
	for _, branch := range stepOps(s, w) {
		t := w
		if s.BeforeReboot() {
			t.took = t.acquired
		}
		var done []string
		for i, o := range branch {
			ok, bad := o.do(&t)
			done = append(done, o.what)
			if bad != "" {
				out = append(out, cMove{s.String() + ": " + strings.Join(done, ", "), t, bad})
				break
			}
			if !ok {
				break
			}
			if i < len(branch)-1 && !t.crashed {
				// The daemon dies after this write.
				c := t
				c.crashed, c.took, c.drainedFor = true, 0, 0
				out = append(out, cMove{s.String() + ": " + strings.Join(done, ", ") + ", then the daemon crashes", c, ""})
			}
		}
		if t != w {
			out = append(out, cMove{s.String() + ": " + strings.Join(done, ", "), t, ""})
		}
	}
	if !w.crashed {
		t := w
		t.crashed, t.took, t.drainedFor = true, 0, 0
		out = append(out, cMove{"the daemon crashes", t, ""})
	}
	if !w.rebooted {
		t := w
		t.rebooted, t.boot, t.took, t.drainedFor = true, w.boot+1, 0, 0
		out = append(out, cMove{"an unplanned reboot", t, ""})
	}
	if !w.removed && w.state != "" {
		t := w
		t.removed, t.state, t.phase, t.acquired, t.cordoned, t.claimBoot = true, "", "", 0, false, 0
		out = append(out, cMove{"the admin removes the claim", t, ""})
	}
	if !w.cordonedByAdmin && !w.unsched {
		t := w
		t.cordonedByAdmin, t.adminCordon, t.unsched = true, true, true
		out = append(out, cMove{"the admin cordons the node", t, ""})
	}
	return out
}

// atRest: the daemon has nothing left to do (its next step writes
// nothing, no reboot is under way): kured-host's cordon must be gone.
func (w cWorld) atRest(next func(Facts) Step) bool {
	return !w.pending && len(stepOps(next(w.facts()), w)) == 0
}

// exploreCycle explores from a node that needs a reboot, deciding with
// next; it returns the states reached, how many of them end with the
// node rebooted and at rest, and the first broken promise with its path.
func exploreCycle(next func(Facts) Step, unsched, old bool) (states, done int, broken string) {
	start := cWorld{needed: true, undrained: true, unsched: unsched, adminCordon: unsched, cordonedByAdmin: unsched}
	if old {
		// A slot an earlier version took, committed before its cordon,
		// and a restart into this version.
		start.state, start.phase, start.acquired, start.acquisitions = claim.Holding, claim.PhaseAcquired, 1, 1
	}
	type visit struct {
		from cWorld
		what string
	}
	seen := map[cWorld]visit{start: {}}
	path := func(w cWorld) string {
		var p []string
		for c := w; c != start; c = seen[c].from {
			p = append(p, seen[c].what)
		}
		slices.Reverse(p)
		return strings.Join(p, "\n  ")
	}
	queue := []cWorld{start}
	for len(queue) > 0 {
		w := queue[0]
		queue = queue[1:]
		if w.atRest(next) {
			if w.mark || (w.unsched && !w.adminCordon) {
				return len(seen), done, "at rest with kured-host's cordon left:\n  " + path(w)
			}
			if w.boot > 0 && !w.needed {
				done++
			}
		}
		for _, m := range w.moves(next) {
			if m.bad != "" {
				seen[m.to] = visit{w, m.what}
				return len(seen), done, m.bad + ":\n  " + path(m.to)
			}
			if _, ok := seen[m.to]; !ok {
				seen[m.to] = visit{w, m.what}
				queue = append(queue, m.to)
			}
		}
	}
	return len(seen), done, ""
}

// TestExploreCycle: from a node that needs a reboot, every interleaving of
// the cycle's steps (the real Next) with the faults above keeps the
// cycle's promises, every state at rest has no cordon of kured-host's
// left, and some paths end with the node rebooted. Also from a slot an
// earlier version took and had not cordoned yet (its commit did not).
func TestExploreCycle(t *testing.T) {
	for _, tc := range []struct{ unsched, old bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("cordoned by an admin from the start: %v, taken by an earlier version: %v", tc.unsched, tc.old), func(t *testing.T) {
			states, done, broken := exploreCycle(Next, tc.unsched, tc.old)
			t.Logf("%d states, %d of them at rest after the reboot", states, done)
			if broken != "" {
				t.Fatal(broken)
			}
			if done == 0 {
				t.Error("no path reboots the node and ends")
			}
		})
	}
}

// TestExploreCycleFindsBrokenRules: each rule of Next broken by hand is
// found, with the path that breaks a promise.
func TestExploreCycleFindsBrokenRules(t *testing.T) {
	tests := []struct {
		name string
		next func(Facts) Step
	}{
		{"resumed in the boot that took the slot (no boot check)", func(f Facts) Step {
			if f.State == claim.Holding && f.Claim.Phase == claim.PhaseRebooting {
				return Resume
			}
			return Next(f)
		}},
		{"the reboot asked for without the drain", func(f Facts) Step {
			if s := Next(f); s == Drain {
				return RequestReboot
			}
			return Next(f)
		}},
		{"an orphaned cordon left alone", func(f Facts) Step {
			if s := Next(f); s != UncordonOrphan {
				return s
			}
			return Idle
		}},
		{"a lost slot taken for no claim at all (Lost as Idle)", func(f Facts) Step {
			if s := Next(f); s != Lost {
				return s
			}
			return Idle
		}},
	}
	t.Run("an abort that uncordons before it records the abort", func(t *testing.T) {
		uncordonFirst = true
		defer func() { uncordonFirst = false }()
		states, _, broken := exploreCycle(Next, false, false)
		if broken == "" {
			t.Fatalf("not found in %d states", states)
		}
		t.Logf("found in %d states: %s", states, broken)
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			states, _, broken := exploreCycle(tt.next, false, false)
			if broken == "" {
				t.Fatalf("not found in %d states", states)
			}
			t.Logf("found in %d states: %s", states, broken)
		})
	}
}
