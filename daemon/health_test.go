package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
)

type notifications struct {
	mu     sync.Mutex
	states []string
}

func (n *notifications) Notify(s string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.states = append(n.states, s)
	return nil
}

type eventLog struct {
	mu       sync.Mutex
	messages map[string][]string // reason -> messages
}

func (e *eventLog) Emit(_ context.Context, _, _, reason, message string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.messages == nil {
		e.messages = map[string][]string{}
	}
	e.messages[reason] = append(e.messages[reason], message)
	return nil
}

// TestWaitHealthy: after the reboot the injected health check runs with
// health.timeout as its bound; a failure keeps the slot, is reported once
// health.timeout has passed, and its text reaches the Event and STATUS=
// on one line.
func TestWaitHealthy(t *testing.T) {
	c := config.Default()
	c.Health.Timeout = config.Duration(time.Nanosecond) // report after the first failure
	var timeouts []time.Duration
	n, ev := &notifications{}, &eventLog{}
	d := &Daemon{
		Config: c, Log: slog.New(slog.DiscardHandler), Manager: n, Events: ev, Now: time.Now,
		Ready: func() ReadyWait { return readyNow{} },
		Health: func(_ context.Context, timeout time.Duration) error {
			timeouts = append(timeouts, timeout)
			if len(timeouts) == 1 {
				return errors.New("command \"check\": exit status 1: not yet\nREADY=1")
			}
			return nil
		},
	}
	if err := d.waitHealthy(context.Background(), d.Log); err != nil {
		t.Fatal(err)
	}
	if len(timeouts) != 2 || timeouts[0] != time.Nanosecond {
		t.Errorf("the check ran with %v, want twice with health.timeout", timeouts)
	}
	if got := ev.messages[ReasonHealthCheckFailed]; len(got) != 1 || !strings.Contains(got[0], `health command "check": exit status 1: not yet`) {
		t.Errorf("events %v", got)
	}
	for _, s := range n.states {
		if strings.ContainsAny(s, "\r\n") {
			t.Errorf("notification %q has a line break (another sd_notify assignment)", s)
		}
	}
}

// TestHealthCommand: the health command of the configuration, on real
// short commands: its timeout is the one given, a process it leaves
// behind holding its output is not waited for, and its output comes back
// escaped.
func TestHealthCommand(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	if err := HealthCommand([]string{"sh", "-c", "sleep 10 & echo ok"})(ctx, 10*time.Second); err != nil {
		t.Errorf("a healthy command that leaves a process behind: %v", err)
	}
	err := HealthCommand([]string{"sh", "-c", "sleep 10 & sleep 10"})(ctx, 200*time.Millisecond)
	if !errors.Is(err, host.ErrTimeout) {
		t.Errorf("a command past its timeout: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("took %s: it waited for the processes left behind", took)
	}
	err = HealthCommand([]string{"sh", "-c", `printf '\033[2Jbad\nline'; exit 1`})(ctx, 10*time.Second)
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\n") || !strings.Contains(err.Error(), `exit status 1: \x1b[2Jbad | line`) {
		t.Errorf("err %q", err)
	}
}

// readyNow is a Node that is Ready in this boot.
type readyNow struct{}

func (readyNow) Next(context.Context, time.Duration) (bool, string, error) { return true, "", nil }
func (readyNow) Stop()                                                     {}
