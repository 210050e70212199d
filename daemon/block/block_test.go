package block

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestWindow(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	weekend := []time.Weekday{time.Saturday, time.Sunday}
	all := []time.Weekday{0, 1, 2, 3, 4, 5, 6}
	h := func(x int) int { return x * 3600 }
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// 2026-11-28 is a Saturday.
	tests := []struct {
		name  string
		w     Window
		at    string
		in    bool
		opens string
	}{
		{"always", Window{Days: all, Start: 0, End: h(24), Loc: berlin}, "2026-11-25 03:00", true, "2026-11-25 03:00"},
		{"weekend night, Saturday 23:00", Window{Days: weekend, Start: h(22), End: h(4), Loc: berlin}, "2026-11-28 23:00", true, "2026-11-28 23:00"},
		{"after midnight belongs to Saturday", Window{Days: weekend, Start: h(22), End: h(4), Loc: berlin}, "2026-11-29 03:59", true, "2026-11-29 03:59"},
		{"Monday 01:00 belongs to Sunday's window", Window{Days: weekend, Start: h(22), End: h(4), Loc: berlin}, "2026-11-30 01:00", true, "2026-11-30 01:00"},
		{"Monday 05:00 is out", Window{Days: weekend, Start: h(22), End: h(4), Loc: berlin}, "2026-11-30 05:00", false, "2026-12-05 22:00"},
		{"Saturday 01:00 belongs to Friday (not in)", Window{Days: weekend, Start: h(22), End: h(4), Loc: berlin}, "2026-11-28 01:00", false, "2026-11-28 22:00"},
		{"end is exclusive", Window{Days: all, Start: h(2), End: h(4), Loc: berlin}, "2026-11-25 04:00", false, "2026-11-26 02:00"},
		{"start is inclusive", Window{Days: all, Start: h(2), End: h(4), Loc: berlin}, "2026-11-25 02:00", true, "2026-11-25 02:00"},
		{"in the zone, not in UTC", Window{Days: all, Start: h(2), End: h(3), Loc: berlin}, "2026-11-25 02:30", true, "2026-11-25 02:30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := at(tt.at)
			if got := tt.w.Contains(now); got != tt.in {
				t.Errorf("Contains = %v, want %v", got, tt.in)
			}
			if got := tt.w.Next(now); !got.Equal(at(tt.opens)) {
				t.Errorf("Next = %s, want %s", got, tt.opens)
			}
			tt.w.Now = func() time.Time { return now }
			reason, err := tt.w.Check(context.Background())
			if err != nil || (reason == "") != tt.in {
				t.Errorf("Check = %q, %v", reason, err)
			}
		})
	}
	// The same wall clock in UTC is another instant.
	w := Window{Days: all, Start: h(2), End: h(3), Loc: time.UTC}
	if w.Contains(at("2026-11-25 02:30")) {
		t.Error("02:30 Berlin is 01:30 UTC, outside 02:00-03:00 UTC")
	}
}

// prometheus serves /api/v1/alerts on loopback.
func prometheus(t *testing.T, status int, body string) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prom/api/v1/alerts" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/prom")
	return u
}

func TestAlerts(t *testing.T) {
	const body = `{"status":"success","data":{"alerts":[
		{"labels":{"alertname":"Watchdog"},"state":"firing"},
		{"labels":{"alertname":"KubeNodeNotReady"},"state":"firing"},
		{"labels":{"alertname":"DiskPressure"},"state":"pending"}]}}`
	tests := []struct {
		name       string
		status     int
		body       string
		filter     string
		matchOnly  bool
		firingOnly bool
		want       string
		err        bool
	}{
		{"every active alert", 200, body, "", false, false, "DiskPressure, KubeNodeNotReady, Watchdog", false},
		{"firing only", 200, body, "", false, true, "KubeNodeNotReady, Watchdog", false},
		{"filter ignores matches", 200, body, "^(Watchdog|DiskPressure)$", false, false, "KubeNodeNotReady", false},
		{"match only", 200, body, "^Kube", true, false, "KubeNodeNotReady", false},
		{"nothing left", 200, body, ".*", false, false, "", false},
		{"no alerts", 200, `{"status":"success","data":{"alerts":[]}}`, "", false, false, "", false},
		{"server error", 500, "oops", "", false, false, "", true},
		{"error answer", 200, `{"status":"error","error":"bad"}`, "", false, false, "", true},
		{"not JSON", 200, `<html>`, "", false, false, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Alerts{URL: prometheus(t, tt.status, tt.body), MatchOnly: tt.matchOnly, FiringOnly: tt.firingOnly, Client: &http.Client{Timeout: 5 * time.Second}}
			if tt.filter != "" {
				a.Filter = regexp.MustCompile(tt.filter)
			}
			reason, err := a.Check(context.Background())
			if (err != nil) != tt.err || !strings.HasSuffix(reason, tt.want) || (tt.want == "") != (reason == "") {
				t.Errorf("got %q, %v; want %q, error %v", reason, err, tt.want, tt.err)
			}
		})
	}
}

func TestCheckFailsSafe(t *testing.T) {
	unreachable, _ := url.Parse("http://127.0.0.1:1")
	got := Check(context.Background(), []Blocker{
		&Alerts{URL: unreachable, Client: &http.Client{Timeout: time.Second}},
		&Window{Days: []time.Weekday{0, 1, 2, 3, 4, 5, 6}, Start: 0, End: 86400, Loc: time.UTC},
	})
	if len(got) != 1 || got[0].Kind != "alerts" || !strings.Contains(got[0].Reason, "cannot tell") {
		t.Errorf("blocked %v, want the unreachable Prometheus to block", got)
	}
	if s := Summary(got); !strings.HasPrefix(s, "alerts: cannot tell, so waiting: ") {
		t.Errorf("summary %q", s)
	}
}

// TestInhibitors on a real private bus with the logind stand-in.
func TestInhibitors(t *testing.T) {
	bus, err := logindtest.StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Stop()
	stand, err := logindtest.Serve(bus.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stand.Close()
	ctx := context.Background()
	l, err := host.DialLogind(ctx, bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := &Inhibitors{Logind: l}
	if r, err := b.Check(ctx); r != "" || err != nil {
		t.Errorf("no inhibitors: %q, %v", r, err)
	}
	stand.SetInhibitors([]logindtest.Inhibitor{{What: "shutdown", Who: "apt", Why: "Installing packages", Mode: "block", PID: 77}})
	if r, err := b.Check(ctx); r != "shutdown is inhibited by apt (pid 77): Installing packages" || err != nil {
		t.Errorf("apt at work: %q, %v", r, err)
	}
	stand.SetInhibitors([]logindtest.Inhibitor{{What: "shutdown", Who: "apt", Why: "x", Mode: "delay", PID: 77}})
	if r, _ := b.Check(ctx); r != "" {
		t.Errorf("a delay inhibitor blocked: %q", r)
	}
	bus.Stop()
	if _, err := b.Check(ctx); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("with the bus gone: %v", err)
	}
}
