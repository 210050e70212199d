package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/marks"
	"github.com/kured-host/kured-host/daemon/notify"
	"github.com/kured-host/kured-host/test/sim/api"
)

// The simulated hosts' pre- and post-reboot label (host.go).
const rebootingLabel = "sim.kured-host.dev/rebooting"

// TestKuredMarks: kured's marks and messages as a kured user relies on
// them, on the real daemon in the simulator (issue 19). Each case runs a
// few times: the daemons' goroutines interleave differently each time.
func TestKuredMarks(t *testing.T) {
	base := smallCluster
	tests := []struct {
		name  string
		opts  func() Options
		check func(t *testing.T, w *World)
	}{{
		// The cluster is paused when the reboot becomes needed: the
		// in-progress mark is there while blocked, before any claim
		// (kured PR #749), with the most-recent-reboot-needed time.
		// n00 was cordoned by the admin: it stays cordoned after its
		// reboot and no "uncordoned" message is sent for it.
		name: "blocked, and one node cordoned by the admin",
		opts: func() Options {
			o := base(2)
			o.Script = func(w *World) {
				if err := w.store.UpdateNode("n00", api.Admin, func(n *corev1.Node) { n.Spec.Unschedulable = true }); err != nil {
					w.violate("cordon n00: %v", err)
				}
				w.setPause(5 * time.Minute)
				w.goSafe(func() {
					if sleep(w.ctx, 5*time.Minute) == nil {
						w.liftPause()
					}
				})
				// The admin uncordons n00 once it is done, so that the
				// world settles.
				w.goSafe(func() {
					for sleep(w.ctx, 5*time.Second) == nil {
						if n := w.store.Node("n00"); w.Hosts[0].planned() == 1 && n.Labels[claim.Label] == "" {
							if !n.Spec.Unschedulable {
								w.violate("n00, cordoned by the admin, was uncordoned by the daemon")
							}
							_ = w.store.UpdateNode("n00", api.Admin, func(n *corev1.Node) { n.Spec.Unschedulable = false })
							return
						}
					}
				})
			}
			return o
		},
		check: func(t *testing.T, w *World) {
			for _, h := range w.Hosts {
				marked, claimed := firstRevision(w, h.Name, func(n *corev1.Node) bool { return n.Annotations[marks.InProgress] != "" }),
					firstRevision(w, h.Name, func(n *corev1.Node) bool { return n.Labels[claim.Label] != "" })
				switch {
				case marked == nil:
					t.Errorf("%s: never marked in progress", h.Name)
				case claimed == nil || marked.RV > claimed.RV:
					t.Errorf("%s: marked in progress only after it joined the queue", h.Name)
				case marked.Node.Annotations[marks.MostRecentNeeded] != marked.Node.Annotations[marks.InProgress]:
					t.Errorf("%s: most-recent-reboot-needed %q, in progress since %q; kured writes both at once", h.Name,
						marked.Node.Annotations[marks.MostRecentNeeded], marked.Node.Annotations[marks.InProgress])
				}
			}
			if got := w.Hosts[0].messages(notify.Uncordon); got != 0 {
				t.Errorf("n00 (cordoned by the admin, left cordoned) sent %d uncordon message(s)", got)
			}
			if got := w.Hosts[1].messages(notify.Uncordon); got != 1 {
				t.Errorf("n01 sent %d uncordon message(s), want 1", got)
			}
			doneMarks(t, w)
		},
	}, {
		// The window opens 10 minutes after the reboot becomes needed
		// (the bubble's clock starts at midnight): no in-progress mark
		// before, as kured sets it only in the window.
		name: "outside the window",
		opts: func() Options {
			o := base(2)
			o.Setup = func(w *World) {
				for _, h := range w.Hosts {
					h.Cfg.Window.Start = config.TimeOfDay(10 * 60)
				}
			}
			return o
		},
		check: func(t *testing.T, w *World) {
			opens := w.start.Add(10 * time.Minute)
			for _, h := range w.Hosts {
				r := firstRevision(w, h.Name, func(n *corev1.Node) bool { return n.Annotations[marks.InProgress] != "" })
				switch {
				case r == nil:
					t.Errorf("%s: never marked in progress", h.Name)
				case r.At.Before(opens):
					t.Errorf("%s: marked in progress at %s, before the window opened at %s", h.Name, r.At.Sub(w.start), opens.Sub(w.start))
				}
			}
			doneMarks(t, w)
		},
	}, {
		// A budget that refuses every eviction for longer than the
		// drain's time-out: the node gives the reboot up, back in
		// service with the post-reboot labels (kured's best-effort
		// uncordon sets them), and keeps the in-progress mark while the
		// reboot is still needed, as kured does.
		name: "a failed drain",
		opts: func() Options {
			o := base(2)
			o.Setup = func(w *World) { stickBudgets(w, 12*time.Minute) }
			return o
		},
		check: func(t *testing.T, w *World) {
			aborts := 0
			for _, h := range w.Hosts {
				aborted := false
				for _, r := range w.store.Revisions() {
					if r.Node.Name != h.Name || r.Deleted {
						continue
					}
					c, err := claim.Parse(r.Node.Labels[claim.Label], r.Node.Annotations[claim.Annotation])
					switch {
					case err == nil && c.Phase == claim.PhaseAborted:
						aborted = true
					case aborted && r.Node.Labels[claim.Label] == "":
						// Given back: from here until the next slot.
						if r.Node.Annotations[marks.InProgress] == "" {
							t.Errorf("%s: the in-progress mark went away after a failed drain (rv %d); the reboot is still needed", h.Name, r.RV)
						}
						if r.Node.Labels[rebootingLabel] == "false" && !r.Node.Spec.Unschedulable {
							aborts++
							aborted = false
						}
					case aborted && c.State == claim.Holding:
						t.Errorf("%s: took a slot again with %s=%q after the failed drain; want the post-reboot value",
							h.Name, rebootingLabel, r.Node.Labels[rebootingLabel])
						aborted = false
					}
				}
			}
			if aborts == 0 {
				t.Error("no node was back in service with its post-reboot labels after a failed drain")
			}
			doneMarks(t, w)
		},
	}}
	const runs = 4
	for _, tt := range tests {
		for run := range runs {
			t.Run(fmt.Sprintf("%s/%d", tt.name, run), func(t *testing.T) {
				t.Parallel()
				w, res := runScenario(t, tt.opts(), run)
				for _, v := range res.Violations {
					t.Errorf("violation: %s", v)
				}
				if !res.Completed {
					t.Error("the roll did not complete")
				}
				tt.check(t, w)
				if t.Failed() {
					t.Logf("trace:\n%s\n%s", strings.Join(res.Trace, "\n"), res.Logs)
				}
			})
		}
	}
}

// doneMarks: after the roll, every node has the post-reboot label and no
// in-progress mark (removed after the reboot, as kured does).
func doneMarks(t *testing.T, w *World) {
	t.Helper()
	for _, h := range w.Hosts {
		n := w.store.Node(h.Name)
		if v := n.Annotations[marks.InProgress]; v != "" {
			t.Errorf("%s: still marked in progress (%s) after its reboot", h.Name, v)
		}
		if v := n.Labels[rebootingLabel]; v != "false" {
			t.Errorf("%s: %s=%q after its reboot, want the post-reboot value", h.Name, rebootingLabel, v)
		}
	}
}

// firstRevision returns the first revision of node for which match holds.
func firstRevision(w *World, node string, match func(*corev1.Node) bool) *api.Revision {
	for _, r := range w.store.Revisions() {
		if r.Node.Name == node && !r.Deleted && match(r.Node) {
			return &r
		}
	}
	return nil
}
