package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/events"
	"github.com/kured-host/kured-host/daemon/lock"
	"github.com/kured-host/kured-host/daemon/logging"
	"github.com/kured-host/kured-host/daemon/marks"
)

// idleLock is a Locker for a node with no claim; the cycle must not get
// past the blockers, so joining is a test failure.
type idleLock struct{ joined chan struct{} }

var errNotHere = errors.New("not expected in this test")

func (l *idleLock) Start(context.Context) error { return nil }
func (l *idleLock) Own(context.Context) (claim.Claim, claim.State, error) {
	return claim.Claim{}, "", nil
}
func (l *idleLock) Known() (claim.Claim, claim.State) { return claim.Claim{}, "" }
func (l *idleLock) Unreadable() error                 { return nil }
func (l *idleLock) Annotation(string) string          { return "" }
func (l *idleLock) Unschedulable() bool               { return false }
func (l *idleLock) Join(context.Context, marks.Change) error {
	close(l.joined)
	return errNotHere
}
func (l *idleLock) Acquire(context.Context, lock.Take) (claim.Claim, error) {
	return claim.Claim{}, errNotHere
}
func (l *idleLock) Update(context.Context, func(*claim.Claim)) (claim.Claim, error) {
	return claim.Claim{}, errNotHere
}
func (l *idleLock) Cordon(context.Context, claim.Phase, marks.Change) (bool, error) {
	return false, errNotHere
}
func (l *idleLock) Confirm(context.Context) (claim.Claim, error)          { return claim.Claim{}, errNotHere }
func (l *idleLock) Release(context.Context) error                         { return errNotHere }
func (l *idleLock) ReleaseUncordoned(context.Context, marks.Change) error { return errNotHere }
func (l *idleLock) ReleaseAfter(context.Context, time.Duration) error     { return errNotHere }
func (l *idleLock) Status() lock.Status                                   { return lock.Status{Position: -1} }
func (l *idleLock) StatusChanged() <-chan struct{}                        { return nil }
func (l *idleLock) SetPaused(bool)                                        {}
func (l *idleLock) SetLimits(claim.Limits)                                {}

// needed is a sentinel that always says a reboot is needed.
type needed struct{}

func (needed) RebootRequired(context.Context) (bool, error) { return true, nil }
func (needed) String() string                               { return "/run/reboot-required" }

// systemd records what the daemon tells the service manager.
type systemd struct {
	mu     sync.Mutex
	states []string
}

func (s *systemd) Notify(state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, state)
	return nil
}

func (s *systemd) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.states, "\n")
}

// syncBuffer is a log destination written by the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPrometheusSecretsStayHidden: a Prometheus that answers 401 to a URL
// with a password and a token in its query blocks the reboot, and neither
// the password nor the token shows in the log, the Event, or STATUS=.
func TestPrometheusSecretsStayHidden(t *testing.T) {
	const password, token = "pr0mPassw0rd", "qu3ryT0ken"
	asked := make(chan struct{}, 10)
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(prom.Close)
	if !strings.HasPrefix(prom.URL, "http://127.0.0.1:") {
		t.Fatalf("the test Prometheus is not on 127.0.0.1: %s", prom.URL)
	}
	file := filepath.Join(t.TempDir(), "config.toml")
	body := fmt.Sprintf("[blockers]\ninhibitors = false\n\n[blockers.prometheus]\nurl = %q\n",
		strings.Replace(prom.URL, "http://", "http://kured:"+password+"@", 1)+"/prom?token="+token)
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := config.LoadFiles(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log, err := logging.New(&logs, logging.Options{Format: "text", Level: "debug"})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	sd := &systemd{}
	lk := &idleLock{joined: make(chan struct{})}
	d := &Daemon{
		Config: l.Config, Log: log, Manager: sd, Lock: lk, Node: "node-1",
		Sentinel: needed{},
		Blockers: blockersFor(l.Config, client, "node-1", nil),
		Events: &events.Limited{
			Sink: &events.Recorder{Client: client, Host: "node-1"}, Now: time.Now,
			Repeat: time.Hour, Spacing: time.Minute,
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(sd.all(), "STATUS=reboot needed; waiting: alerts:") {
		select {
		case <-lk.joined:
			t.Fatal("joined the queue although Prometheus could not be asked")
		case <-deadline:
			t.Fatalf("never blocked; STATUS= so far:\n%s\nlog:\n%s", sd.all(), logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	default:
		t.Fatal("Prometheus was never asked")
	}

	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var evText strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&evText, "%s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	outputs := map[string]string{"log": logs.String(), "Events": evText.String(), "STATUS=": sd.all()}
	for what, out := range outputs {
		for _, secret := range []string{password, token} {
			if strings.Contains(out, secret) {
				t.Errorf("the %s shows %q:\n%s", what, secret, out)
			}
		}
	}
	// And what they do say: where, and why.
	for what, want := range map[string]string{
		"log":     `blocked by alerts in http://…@127.0.0.1:`,
		"Events":  "Normal Blocked: Reboot needed but waiting: alerts: cannot tell, so waiting: ask Prometheus at http://…@127.0.0.1:",
		"STATUS=": "it answered 401 Unauthorized; check the credentials",
	} {
		if !strings.Contains(outputs[what], want) {
			t.Errorf("the %s lacks %q:\n%s", what, want, outputs[what])
		}
	}
}
