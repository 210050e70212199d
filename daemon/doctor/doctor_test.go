package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name string
		f    Finding
		want string
	}{
		{"ok", Finding{Level: OK, Check: "identity", Message: "system:node:n1: node n1"}, "ok   identity: system:node:n1: node n1\n"},
		{"warn", Finding{Level: Warn, Check: "clock", Message: "31s"}, "warn clock: 31s\n"},
		{"fail with detail", Finding{Level: Fail, Check: "permissions", Message: "may not list nodes", Detail: "Apply:\n\nkind: X\n"},
			"fail permissions: may not list nodes\n     Apply:\n\n     kind: X\n"},
		{"unknown level", Finding{Level: Level(7), Check: "x", Message: "y"}, "level(7) x: y\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := Render(&b, tt.f); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), tt.want)
			}
		})
	}
}

func TestWorstAndCount(t *testing.T) {
	tests := []struct {
		name   string
		levels []Level
		worst  Level
		fails  int
	}{
		{"none", nil, OK, 0},
		{"all ok", []Level{OK, OK}, OK, 0},
		{"a warning", []Level{OK, Warn, OK}, Warn, 0},
		{"failures", []Level{Fail, Warn, Fail, OK}, Fail, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var fs []Finding
			for _, l := range tt.levels {
				fs = append(fs, Finding{Level: l})
			}
			if got := Worst(fs); got != tt.worst {
				t.Errorf("Worst = %v, want %v", got, tt.worst)
			}
			if got := Count(fs)[Fail]; got != tt.fails {
				t.Errorf("Count[Fail] = %d, want %d", got, tt.fails)
			}
		})
	}
}

func TestBoundsFor(t *testing.T) {
	d := func(s string) config.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return config.Duration(v)
	}
	tests := []struct {
		name       string
		lock       func(*config.LockConfig)
		warn, fail time.Duration
		why        string
	}{
		{"defaults: half the entering alarm age", nil, 30 * time.Second, 5 * time.Minute, "lock.entering_alarm_age"},
		{"a smaller holder alarm age", func(l *config.LockConfig) { l.AlarmAge = d("6m") }, 30 * time.Second, 3 * time.Minute, "lock.alarm_age"},
		{"a TTL below both", func(l *config.LockConfig) { l.TTL = d("4m") }, 30 * time.Second, 2 * time.Minute, "lock.ttl"},
		{"a TTL above both changes nothing", func(l *config.LockConfig) { l.TTL = d("3h") }, 30 * time.Second, 5 * time.Minute, "lock.entering_alarm_age"},
		{"tiny ages pull the warning down", func(l *config.LockConfig) { l.EnteringAlarmAge = d("20s") }, 10 * time.Second, 10 * time.Second, "lock.entering_alarm_age"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := config.Default().Lock
			if tt.lock != nil {
				tt.lock(&l)
			}
			b := BoundsFor(l)
			if b.Warn != tt.warn || b.Fail != tt.fail || !strings.Contains(b.Why, tt.why) {
				t.Errorf("got %+v, want warn %s, fail %s, why %s", b, tt.warn, tt.fail, tt.why)
			}
		})
	}
}

func TestClock(t *testing.T) {
	b := ClockBounds{Warn: 30 * time.Second, Fail: 5 * time.Minute, Why: "half of lock.entering_alarm_age (10m0s)"}
	tests := []struct {
		name   string
		offset time.Duration
		seen   bool
		level  Level
		in     string
	}{
		{"not measured", 0, false, Warn, "unknown"},
		{"in step", 0, true, OK, "this host is within a second of the API server (warn above 30s, fail above 5m0s)"},
		{"nearly in step", -900 * time.Millisecond, true, OK, "within a second"},
		{"server ahead", 1600 * time.Millisecond, true, OK, "this host is 2s behind the API server"},
		{"at the warning bound", 30 * time.Second, true, OK, "30s behind"},
		{"host ahead past the warning", -31 * time.Second, true, Warn, "31s ahead of the API server, more than 30s"},
		{"at the failing bound", 5 * time.Minute, true, Warn, "check fails above 5m0s (half of lock.entering_alarm_age"},
		{"past the failing bound", -6 * time.Minute, true, Fail, "6m0s ahead of the API server, more than 5m0s (half of lock.entering_alarm_age (10m0s)): other nodes' claims"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Clock(tt.offset, tt.seen, b)
			if f.Level != tt.level || f.Check != "clock" || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s, want level %s and %q", f, tt.level, tt.in)
			}
		})
	}
}

// TestRenderPrintable: a finding that quotes the cluster reaches the
// terminal with its escapes shown, not acted on.
func TestRenderPrintable(t *testing.T) {
	var b strings.Builder
	f := Finding{Level: Fail, Check: "settings", Message: "not valid: \x1b[2J\u202eevil", Detail: "line \x1b]0;x\x07\nnext"}
	if err := Render(&b, f); err != nil {
		t.Fatal(err)
	}
	want := "fail settings: not valid: \\x1b[2J\\u202eevil\n" + detailIndent + "line \\x1b]0;x\\x07\n" + detailIndent + "next\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
