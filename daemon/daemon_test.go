package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/lock"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name   string
		change func(*config.Config)
		want   []string // substrings that must appear in the plan
	}{
		{"defaults", func(*config.Config) {}, []string{
			"reboot needed when /run/reboot-required exists",
			"reboots may start at any time",
			"at most 1 node(s) of the cluster at once, 1 per topology.kubernetes.io/zone",
			"blocked by logind shutdown inhibitors",
			"drain first, then reboot through logind",
		}},
		{"command sentinel and window", func(c *config.Config) {
			c.Sentinel.Command = []string{"/usr/bin/needs-restarting", "-r"}
			c.Sentinel.RebootExitCodes = []int{1}
			c.Window.Days = []config.Weekday{config.Weekday(time.Saturday)}
			c.Window.Start, c.Window.End = 22*3600, 4*3600
			c.Window.TimeZone = config.MustLocation("Europe/Berlin")
		}, []string{
			`reboot needed when "/usr/bin/needs-restarting -r" exits with [1]`,
			"on sat from 22:00 to 04:00 Europe/Berlin",
		}},
		{"forced reboot by command", func(c *config.Config) {
			c.Drain.Timeout = config.Duration(10 * time.Minute)
			c.Drain.ForceReboot = true
			c.Reboot.Method = config.RebootCommand
			c.Lock.Concurrency = 3
			c.Lock.Groups = nil
		}, []string{
			"drain first (timeout 10m, then reboot anyway), then reboot with \"/bin/systemctl reboot\"",
			"at most 3 node(s) of the cluster at once (or",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.change(&c)
			plan := strings.Join(Plan(c), "\n")
			for _, w := range tt.want {
				if !strings.Contains(plan, w) {
					t.Errorf("plan lacks %q:\n%s", w, plan)
				}
			}
		})
	}
}

// TestShowQueue: the status line for each state of the lock while the
// cycle waits for a slot. A slot just taken leaves the line as it was:
// the cycle's next step says what it does with it, and "waiting" must
// not flash up in between.
func TestShowQueue(t *testing.T) {
	tests := []struct {
		name string
		st   lock.Status
		want string
	}{
		{"just joined", lock.Status{State: claim.Waiting, Position: -1}, "waiting for a reboot slot"},
		{"in the queue", lock.Status{State: claim.Waiting, Position: 2, Reason: "zone a is full"}, "waiting for a reboot slot: 2 ahead (zone a is full)"},
		{"behind the front", lock.Status{State: claim.Waiting, Position: -1, Behind: "n7", Reason: "behind the front of the queue"}, "waiting for a reboot slot: behind n7 (behind the front of the queue)"},
		{"entering", lock.Status{State: claim.Entering, Position: -1, Reason: "verifying"}, "taking a reboot slot: verifying"},
		{"taken", lock.Status{State: claim.Holding, Position: -1}, "before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd := &systemd{}
			d := &Daemon{Manager: sd}
			d.setManagerStatus("before")
			d.showQueue(tt.st)
			if got := d.managerStatus; got != tt.want {
				t.Errorf("status %q, want %q (sent: %q)", got, tt.want, sd.all())
			}
		})
	}
}
