package cycle

import (
	"iter"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
)

func TestNext(t *testing.T) {
	took := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	other := took.Add(time.Second)
	holding := func(p claim.Phase, boot string) Facts {
		return Facts{State: claim.Holding, Claim: claim.Claim{Phase: p, BootID: boot, Acquired: &took}, Boot: "b1"}
	}
	with := func(f Facts, change func(*Facts)) Facts { change(&f); return f }

	tests := []struct {
		name string
		f    Facts
		want Step
	}{
		// No claim.
		{"no claim", Facts{}, Idle},
		{"no claim, reboot not needed", Facts{NotNeeded: true}, Idle},
		{"no claim, our cordon left", Facts{CordonMark: true}, UncordonOrphan},

		// In the queue.
		{"waiting", Facts{State: claim.Waiting}, Acquire},
		{"waiting, reboot no longer needed", Facts{State: claim.Waiting, NotNeeded: true}, LeaveQueue},
		{"entering", Facts{State: claim.Entering}, Acquire},
		{"entering stays though not needed: verify decides", Facts{State: claim.Entering, NotNeeded: true}, Acquire},

		// Unreadable claims: removed only when they stand for nothing done.
		{"unreadable waiting", Facts{State: claim.Waiting, Unreadable: true}, RemoveUnreadable},
		{"unreadable entering", Facts{State: claim.Entering, Unreadable: true}, RemoveUnreadable},
		{"unreadable holding", Facts{State: claim.Holding, Unreadable: true}, KeepUnreadable},
		{"unreadable, unknown state", Facts{State: "borrowed", Unreadable: true}, KeepUnreadable},
		{"unreadable wins over lost", Facts{State: claim.Waiting, Unreadable: true, Took: &took}, RemoveUnreadable},
		{"a state this daemon does not write", Facts{State: "borrowed"}, KeepUnreadable},

		// Before the reboot: one phase per step.
		{"acquired", holding(claim.PhaseAcquired, "b1"), Cordon},
		{"acquired, no boot recorded", holding(claim.PhaseAcquired, ""), Cordon},
		{"cordoned", holding(claim.PhaseCordoned, "b1"), StartDrain},
		{"draining", holding(claim.PhaseDraining, "b1"), Drain},
		{"draining, drained by this process", with(holding(claim.PhaseDraining, "b1"), func(f *Facts) { f.Drained = true }), RequestReboot},
		{"draining, drained, claim rewritten", with(holding(claim.PhaseDraining, "b1"), func(f *Facts) { f.Drained, f.Took = true, &other }), Lost},
		{"draining, drained, then an unplanned reboot", with(holding(claim.PhaseDraining, "b0"), func(f *Facts) { f.Drained = true }), RecordBack},
		{"drained", holding(claim.PhaseDrained, "b1"), RequestReboot},
		{"rebooting, still up", holding(claim.PhaseRebooting, "b1"), RequestReboot},
		{"aborted", holding(claim.PhaseAborted, "b1"), FinishAbort},
		{"rebooted in the same boot", holding(claim.PhaseRebooted, "b1"), GiveBack},
		{"releasing in the same boot", holding(claim.PhaseReleasing, "b1"), GiveBack},
		{"holding though not needed: the reboot goes on", with(holding(claim.PhaseDraining, "b1"), func(f *Facts) { f.NotNeeded = true }), Drain},

		// After a reboot (the boot changed).
		{"rebooting, new boot", holding(claim.PhaseRebooting, "b0"), RecordBack},
		{"unplanned reboot while draining", holding(claim.PhaseDraining, "b0"), RecordBack},
		{"unplanned reboot while aborting", holding(claim.PhaseAborted, "b0"), RecordBack},
		{"rebooted, recorded", holding(claim.PhaseRebooted, "b0"), Resume},
		{"releasing", holding(claim.PhaseReleasing, "b0"), Resume},

		// A slot taken by this process, gone or rewritten.
		{"taken, still ours", with(holding(claim.PhaseCordoned, "b1"), func(f *Facts) { f.Took = &took }), StartDrain},
		{"taken, claim removed", Facts{Took: &took}, Lost},
		{"taken, removed, cordon left", Facts{Took: &took, CordonMark: true}, Lost},
		{"taken, now waiting", Facts{State: claim.Waiting, Took: &took}, Lost},
		{"taken, acquired time rewritten", with(holding(claim.PhaseCordoned, "b1"), func(f *Facts) { f.Took = &other }), Lost},
		{"taken, acquired time removed", with(holding(claim.PhaseCordoned, "b1"), func(f *Facts) { f.Took, f.Claim.Acquired = &took, nil }), Lost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Next(tt.f); got != tt.want {
				t.Errorf("Next(%+v) = %v, want %v", tt.f, got, tt.want)
			}
		})
	}
}

// everyFacts yields the Facts of every state (one this daemon does not
// write included), phase, boot and combination of the flags.
func everyFacts() iter.Seq[Facts] {
	took := time.Now()
	states := []claim.State{"", claim.Waiting, claim.Entering, claim.Holding, "borrowed"}
	phases := []claim.Phase{claim.PhaseAcquired, claim.PhaseCordoned, claim.PhaseDraining, claim.PhaseDrained,
		claim.PhaseRebooting, claim.PhaseRebooted, claim.PhaseReleasing, claim.PhaseAborted}
	return func(yield func(Facts) bool) {
		for _, s := range states {
			for _, p := range phases {
				for _, boot := range []string{"", "b0", "b1"} {
					for bits := range 32 {
						f := Facts{State: s, Claim: claim.Claim{Phase: p, BootID: boot, Acquired: &took}, Boot: "b1",
							Unreadable: bits&1 != 0, CordonMark: bits&2 != 0, NotNeeded: bits&4 != 0, Drained: bits&16 != 0}
						if bits&8 != 0 {
							f.Took = &took
						}
						if !yield(f) {
							return
						}
					}
				}
			}
		}
	}
}

// Every step is reached by some Facts and named: a step added without a
// rule that reaches it, or a name, fails here.
func TestEveryStepReachedAndNamed(t *testing.T) {
	reached := map[Step]bool{}
	for f := range everyFacts() {
		reached[Next(f)] = true
	}
	for s := RemoveUnreadable; s <= Resume; s++ {
		if !reached[s] {
			t.Errorf("step %v is never reached", s)
		}
		if s.String() == "unknown" || s.String() == "" {
			t.Errorf("step %d has no name", s)
		}
	}
	if Step(len(names)).String() != "unknown" {
		t.Errorf("a step past the last has a name")
	}
}

// BeforeReboot is exactly the steps Next takes on a readable holding
// claim, still this process's if it took one, in the boot that took it.
func TestBeforeReboot(t *testing.T) {
	for f := range everyFacts() {
		want := f.State == claim.Holding && !f.Unreadable && f.Claim.BootID != "b0"
		if got := Next(f); got.BeforeReboot() != want {
			t.Errorf("Next(%+v) = %v, BeforeReboot %v, want %v", f, got, got.BeforeReboot(), want)
		}
	}
}
