// Package cycle decides the reboot cycle's next step on one node from what
// its daemon knows: its own claim, its Node's cordon mark, this boot and
// the sentinel. It does no I/O and reads no clock: the daemon (package
// daemon) gathers the Facts, runs the Step, and asks again. The order of
// the rules is the cycle's safety: an unreadable claim is never acted on,
// a slot that went away is never resumed, a phase is resumed only in the
// boot it belongs to.
package cycle

import (
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

// Facts are what the daemon knows when it decides.
type Facts struct {
	// State and Claim are the own claim as last read or written ("" and
	// the zero claim when there is none).
	State claim.State
	Claim claim.Claim
	// Unreadable: the own claim cannot be read (garbage, another
	// version, a label and annotation that disagree).
	Unreadable bool
	// Took is when the slot this process took in this boot was acquired
	// (its claim's Acquired), as the last step saw it; nil when it holds
	// none before a reboot.
	Took *time.Time
	// Boot is this boot's ID; read only while holding.
	Boot string
	// CordonMark: the Node carries kured-host's cordon annotation.
	CordonMark bool
	// NotNeeded: the sentinel says, without an error, that no reboot is
	// needed.
	NotNeeded bool
	// Drained: this process drained the node for the slot it holds (the
	// claim's Acquired), and no phase records it: with no reboot delay
	// the reboot's record is the next write. Lost in a restart, which
	// drains again (nothing is left to evict).
	Drained bool
}

// Step is one transition of the cycle.
type Step int

// The steps, each run by the daemon and named in its logs.
const (
	// RemoveUnreadable: a waiting or entering claim that cannot be read
	// stands for nothing done yet; remove it and start over.
	RemoveUnreadable Step = iota
	// KeepUnreadable: a holding claim (or one in a state this daemon
	// does not write) that cannot be read may stand for a cordon, a
	// drain, a reboot asked for; leave it alone and say so.
	KeepUnreadable
	// Lost: the slot this process took went away or was rewritten
	// before the reboot: put the node back and start over.
	Lost
	// UncordonOrphan: no claim, but a cordon of ours outlived it.
	UncordonOrphan
	// Idle: no claim; join the queue when a reboot is needed and
	// nothing blocks it.
	Idle
	// LeaveQueue: waiting for a reboot no longer needed.
	LeaveQueue
	// Acquire: waiting or entering; take a slot.
	Acquire
	// Cordon: the slot was just taken (last look at the blockers, then
	// the cordon).
	Cordon
	// StartDrain: cordoned; mark, tell, wait drain.delay, record the
	// drain.
	StartDrain
	// Drain: evict the pods.
	Drain
	// RequestReboot: drained (recorded, or done by this process), or the
	// reboot already asked for in this boot; record it and ask (again).
	RequestReboot
	// FinishAbort: the reboot was given up; uncordon and release.
	FinishAbort
	// GiveBack: a phase that belongs after a reboot, in the boot that
	// took the slot (written by something else): released as an abort.
	GiveBack
	// RecordBack: the boot changed; record that the reboot happened.
	RecordBack
	// Resume: rebooted and recorded; wait until healthy, put the node
	// back, release after the release delay.
	Resume
)

var names = [...]string{
	RemoveUnreadable: "remove unreadable claim",
	KeepUnreadable:   "keep unreadable claim",
	Lost:             "lost",
	UncordonOrphan:   "uncordon orphan",
	Idle:             "idle",
	LeaveQueue:       "leave queue",
	Acquire:          "acquire",
	Cordon:           "cordon",
	StartDrain:       "start drain",
	Drain:            "drain",
	RequestReboot:    "request reboot",
	FinishAbort:      "finish abort",
	GiveBack:         "give back",
	RecordBack:       "record back",
	Resume:           "resume",
}

func (s Step) String() string {
	if s < 0 || int(s) >= len(names) {
		return "unknown"
	}
	return names[s]
}

// BeforeReboot reports whether s works on a slot taken in this boot: from
// then on a claim that goes away is lost (Facts.Took).
func (s Step) BeforeReboot() bool {
	switch s {
	case Cordon, StartDrain, Drain, RequestReboot, FinishAbort, GiveBack:
		return true
	}
	return false
}

// Next is the step the cycle takes from f.
func Next(f Facts) Step {
	if f.Unreadable {
		return unreadable(f.State)
	}
	if f.Took != nil && !stillTaken(f) {
		return Lost
	}
	switch f.State {
	case "":
		if f.CordonMark {
			return UncordonOrphan
		}
		return Idle
	case claim.Waiting:
		// Checked before each try, not only while it waits: a claim can
		// outlive the need it was made for (a reboot that happened
		// anyway, after a lost claim), and a free slot would be taken at
		// once for a reboot nobody needs.
		if f.NotNeeded {
			return LeaveQueue
		}
		return Acquire
	case claim.Entering:
		return Acquire
	case claim.Holding:
		if f.Claim.BootID != "" && f.Claim.BootID != f.Boot {
			return afterReboot(f.Claim.Phase)
		}
		return beforeReboot(f.Claim.Phase, f.Drained)
	}
	return KeepUnreadable // a state this daemon does not write
}

func unreadable(s claim.State) Step {
	if s == claim.Waiting || s == claim.Entering {
		return RemoveUnreadable
	}
	return KeepUnreadable
}

// stillTaken: the claim is still the holding claim this process took
// (Acquired is rewritten by no step of this daemon).
func stillTaken(f Facts) bool {
	return f.State == claim.Holding && f.Claim.Acquired != nil && f.Claim.Acquired.Equal(*f.Took)
}

// beforeReboot: in the boot that took the slot, one phase per step, each
// recorded before the step it names, so that a restart resumes there; a
// drain done is known from the process (drained) when no phase records it.
func beforeReboot(p claim.Phase, drained bool) Step {
	switch p {
	case claim.PhaseAcquired:
		return Cordon
	case claim.PhaseCordoned:
		return StartDrain
	case claim.PhaseDraining:
		if drained {
			return RequestReboot
		}
		return Drain
	case claim.PhaseDrained, claim.PhaseRebooting:
		return RequestReboot
	case claim.PhaseAborted:
		return FinishAbort
	}
	return GiveBack
}

// afterReboot: after any boot, planned or not, in any phase, the reboot
// is recorded once and the slot freed only once this boot is healthy.
func afterReboot(p claim.Phase) Step {
	if p == claim.PhaseRebooted || p == claim.PhaseReleasing {
		return Resume
	}
	return RecordBack
}
