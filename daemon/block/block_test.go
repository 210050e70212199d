package block

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
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

// TestWindowOpenings: the week ahead as check prints it; the hours after
// midnight go with the day the window opened (kured: with the day they
// fall on).
func TestWindowOpenings(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	weekdays := []time.Weekday{1, 2, 3, 4, 5}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("Mon 2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	week := 7 * 24 * time.Hour
	tests := []struct {
		name string
		w    Window
		from string
		want []string // "open - close"
	}{
		{"mon-fri across midnight, from Saturday noon", Window{Days: weekdays, Start: 21 * 3600, End: 5 * 3600, Loc: berlin}, "Sat 2026-11-28 12:00", []string{
			"Mon 2026-11-30 21:00 - Tue 2026-12-01 05:00", "Tue 2026-12-01 21:00 - Wed 2026-12-02 05:00", "Wed 2026-12-02 21:00 - Thu 2026-12-03 05:00",
			"Thu 2026-12-03 21:00 - Fri 2026-12-04 05:00", "Fri 2026-12-04 21:00 - Sat 2026-12-05 05:00",
		}},
		{"open now: Saturday 01:00 belongs to Friday's opening", Window{Days: weekdays, Start: 21 * 3600, End: 5 * 3600, Loc: berlin}, "Sat 2026-11-28 01:00", []string{
			"Fri 2026-11-27 21:00 - Sat 2026-11-28 05:00", "Mon 2026-11-30 21:00 - Tue 2026-12-01 05:00", "Tue 2026-12-01 21:00 - Wed 2026-12-02 05:00",
			"Wed 2026-12-02 21:00 - Thu 2026-12-03 05:00", "Thu 2026-12-03 21:00 - Fri 2026-12-04 05:00", "Fri 2026-12-04 21:00 - Sat 2026-12-05 05:00",
		}},
		{"touching openings are one", Window{Days: weekdays, Start: 0, End: 24 * 3600, Loc: berlin}, "Sat 2026-11-28 12:00", []string{
			"Mon 2026-11-30 00:00 - Sat 2026-12-05 00:00",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, o := range tt.w.Openings(at(tt.from), week) {
				got = append(got, o.Open.Format("Mon 2006-01-02 15:04")+" - "+o.Close.Format("Mon 2006-01-02 15:04"))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("openings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
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

// prometheus answers the query for ALERTS under /prom on loopback, and
// 400 to any other request.
func prometheus(t *testing.T, status int, body string) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/prom/api/v1/query" || r.URL.RawQuery != "query=ALERTS" {
			http.Error(w, `{"status":"error","errorType":"bad_data","error":"unexpected request"}`, http.StatusBadRequest)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/prom")
	return u
}

// vector is a query reply with these series of ALERTS, each given as
// alertname, alertstate and value.
func vector(series ...[3]string) string {
	var items []string
	for _, s := range series {
		items = append(items, fmt.Sprintf(`{"metric":{"__name__":"ALERTS","alertname":%q,"alertstate":%q,"severity":"warning"},"value":[1764000000.123,%q]}`, s[0], s[1], s[2]))
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(items, ",") + `]}}`
}

func TestAlerts(t *testing.T) {
	body := vector(
		[3]string{"Watchdog", "firing", "1"},
		[3]string{"KubeNodeNotReady", "firing", "1"},
		[3]string{"KubeNodeNotReady", "pending", "1"}, // another node's, still pending
		[3]string{"DiskPressure", "pending", "1"},
		[3]string{"Resolved", "firing", "0"},
	)
	tests := []struct {
		name       string
		status     int
		body       string
		filter     string
		matchOnly  bool
		firingOnly bool
		want       string
		err        string // in the error; "" for none
	}{
		{"every active alert", 200, body, "", false, false, "DiskPressure, KubeNodeNotReady, Watchdog", ""},
		{"firing only", 200, body, "", false, true, "KubeNodeNotReady, Watchdog", ""},
		{"filter ignores matches", 200, body, "^(Watchdog|DiskPressure)$", false, false, "KubeNodeNotReady", ""},
		{"filter is not anchored", 200, body, "Disk|dog", false, false, "KubeNodeNotReady", ""},
		{"match only", 200, body, "^Kube", true, false, "KubeNodeNotReady", ""},
		{"match only, firing only", 200, body, "Disk", true, true, "", ""},
		{"nothing left", 200, body, ".*", false, false, "", ""},
		{"no alerts", 200, vector(), "", false, false, "", ""},
		{"a series without alertname", 200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"ALERTS"},"value":[1,"1"]}]}}`, "", false, false, "", ""},
		{"a value that cannot be read counts", 200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"Odd","alertstate":"firing"},"value":[1,1]}]}}`, "", false, false, "Odd", ""},
		{"server error", 500, "oops", "", false, false, "", "it answered 500 Internal Server Error"},
		{"query API error", 503, `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`, "", false, false, "",
			`it answered 503 Service Unavailable: "query timed out in expression evaluation"`},
		{"error answer", 200, `{"status":"error","error":"bad"}`, "", false, false, "", `it answered "error": "bad"`},
		{"not JSON", 200, `<html>`, "", false, false, "", "the reply is not Prometheus's JSON"},
		{"the alerts API's reply", 200, `{"status":"success","data":{"alerts":[]}}`, "", false, false, "", `it answered a "" rather than an instant vector`},
		{"a scalar", 200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`, "", false, false, "", "rather than an instant vector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Alerts{URL: prometheus(t, tt.status, tt.body), MatchOnly: tt.matchOnly, FiringOnly: tt.firingOnly, Client: &http.Client{Timeout: 5 * time.Second}}
			if tt.filter != "" {
				a.Filter = regexp.MustCompile(tt.filter)
			}
			reason, err := a.Check(context.Background())
			switch {
			case tt.err == "" && err != nil, tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err = %v, want %q in it", err, tt.err)
			case !strings.HasSuffix(reason, tt.want) || (tt.want == "") != (reason == ""):
				t.Errorf("reason %q, want %q", reason, tt.want)
			}
		})
	}
}

// TestAlertsQueryURL: the query goes under the URL's path, and the URL's
// own query (a proxy's token) is kept as written, after ours.
func TestAlertsQueryURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"http://prom:9090", "http://prom:9090/api/v1/query?query=ALERTS"},
		{"http://prom:9090/", "http://prom:9090/api/v1/query?query=ALERTS"},
		{"https://host/prometheus", "https://host/prometheus/api/v1/query?query=ALERTS"},
		{"https://host/select/0/prometheus/", "https://host/select/0/prometheus/api/v1/query?query=ALERTS"},
		{"http://u:p@prom:9090/p?token=a%2Bb&x=1", "http://u:p@prom:9090/p/api/v1/query?query=ALERTS&token=a%2Bb&x=1"},
		{"http://prom:9090/?", "http://prom:9090/api/v1/query?query=ALERTS"},
		{"http://prom:9090/#frag", "http://prom:9090/api/v1/query?query=ALERTS"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := (&Alerts{URL: u}).queryURL(); got != tt.want {
				t.Errorf("queryURL = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestAlertsServerErrorsHideSecrets: VictoriaMetrics quotes the request's
// URI in its errors; the token in it is not shown.
func TestAlertsServerErrorsHideSecrets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"status":"error","errorType":"422","error":"error when executing query=\"ALERTS\"; requestURI: %s"}`, r.URL.RequestURI())
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/vm?token=" + queryToken)
	_, err := (&Alerts{URL: u, Timeout: 5 * time.Second}).Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "it answered 422 Unprocessable Entity: \"error when executing query") {
		t.Fatalf("err = %v", err)
	}
	noSecret(t, err.Error())
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
	if !Failed(got) {
		t.Errorf("blocked %+v: want the check that could not be made marked Failed (it is tried again sooner)", got)
	}
	// A window that is closed blocks, and its check was made.
	closed := Check(context.Background(), []Blocker{&Window{Days: []time.Weekday{}, Start: 0, End: 86400, Loc: time.UTC}})
	if len(closed) != 1 || Failed(closed) {
		t.Errorf("closed window: blocked %+v, want one block, not Failed", closed)
	}
}

// TestInhibitors on a real private bus with the logind stand-in.
func TestInhibitors(t *testing.T) {
	// Its own bus, which the test stops.
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
	l, err := host.DialLogind(ctx, stand.Address)
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

// The secrets of the tests below; no error may show them.
const (
	promUser     = "kured"
	promPassword = "pr0mPassw0rd"
	promToken    = "b3arerT0ken"
	queryToken   = "qu3ryT0ken"
)

func noSecret(t *testing.T, s string) {
	t.Helper()
	for _, w := range []string{promPassword, promToken, queryToken, "alice"} {
		if strings.Contains(s, w) {
			t.Errorf("%q shows %q", s, w)
		}
	}
}

// authProm answers the query with no alerts to requests whose
// Authorization header is want, and 401 to the others.
func authProm(t *testing.T, tlsServer bool, want string) *httptest.Server {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != want {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(vector()))
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	if tlsServer {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAlertsCredentials(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(promUser+":"+promPassword))
	bearer := "Bearer " + promToken
	passFile := writeFile(t, "pass", promPassword+"\n")
	tokenFile := writeFile(t, "token", "  "+promToken+"\n")
	emptyFile := writeFile(t, "empty", "\n")
	parse := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		name string
		want string // the Authorization header the server accepts
		a    func(srv string) *Alerts
		err  string // in the error; "" for none
	}{
		{"password file", basic, func(srv string) *Alerts {
			return &Alerts{URL: parse(srv), Username: promUser, PasswordFile: passFile}
		}, ""},
		{"bearer token file", bearer, func(srv string) *Alerts { return &Alerts{URL: parse(srv), BearerTokenFile: tokenFile} }, ""},
		{"password in the URL", basic, func(srv string) *Alerts {
			u := parse(srv)
			u.User = url.UserPassword(promUser, promPassword)
			return &Alerts{URL: u}
		}, ""},
		{"wrong password in the URL, token in the query", basic, func(srv string) *Alerts {
			u := parse(srv + "/?token=" + queryToken)
			u.User = url.UserPassword("alice", promPassword+"x")
			return &Alerts{URL: u}
		}, "it answered 401 Unauthorized; check the credentials"},
		{"password file gone", basic, func(srv string) *Alerts {
			return &Alerts{URL: parse(srv), Username: promUser, PasswordFile: passFile + ".gone"}
		}, "blockers.prometheus.password_file " + passFile + ".gone: no such file or directory"},
		{"empty token file", bearer, func(srv string) *Alerts {
			return &Alerts{URL: parse(srv), BearerTokenFile: emptyFile}
		}, "blockers.prometheus.bearer_token_file " + emptyFile + ": the file is empty"},
		{"a directory as the token file", bearer, func(srv string) *Alerts {
			return &Alerts{URL: parse(srv), BearerTokenFile: t.TempDir()}
		}, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := authProm(t, false, tt.want)
			a := tt.a(srv.URL)
			a.Timeout = 5 * time.Second
			reason, err := a.Check(context.Background())
			if tt.err == "" {
				if err != nil || reason != "" {
					t.Fatalf("Check = %q, %v", reason, err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), "ask Prometheus at http://") {
				t.Errorf("the error does not name the Prometheus: %v", err)
			}
			if !strings.Contains(err.Error(), tt.err) {
				t.Errorf("err = %v, want %q in it", err, tt.err)
			}
			noSecret(t, err.Error())
		})
	}
}

// TestAlertsErrorsHideTheURL: a refused connection (net/http's *url.Error
// has the URL with its query) and a timeout show the URL redacted.
func TestAlertsErrorsHideTheURL(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	}))
	t.Cleanup(slow.Close)
	for _, raw := range []string{
		"http://alice:" + promPassword + "@127.0.0.1:1/prom/?token=" + queryToken,
		strings.Replace(slow.URL, "http://", "http://alice:"+promPassword+"@", 1) + "/?token=" + queryToken,
	} {
		u, _ := url.Parse(raw)
		a := &Alerts{URL: u, Timeout: 100 * time.Millisecond}
		_, err := a.Check(context.Background())
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		noSecret(t, err.Error())
		if !strings.Contains(err.Error(), "http://…@127.0.0.1:") {
			t.Errorf("the error does not show the redacted URL: %v", err)
		}
	}
}

func TestAlertsCAFile(t *testing.T) {
	srv := authProm(t, true, "")
	u, _ := url.Parse(srv.URL)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ca := writeFile(t, "ca.pem", string(certPEM))
	a := &Alerts{URL: u, CAFile: ca, Timeout: 5 * time.Second}
	if reason, err := a.Check(context.Background()); err != nil || reason != "" {
		t.Fatalf("with the server's certificate: %q, %v", reason, err)
	}
	// Rotated to another CA: the next request uses it.
	if err := os.WriteFile(ca, otherCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("after the CA file changed: %v, want a certificate error", err)
	}
	if err := os.WriteFile(ca, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "blockers.prometheus.ca_file "+ca+": no PEM certificate in it") {
		t.Errorf("a CA file without PEM: %v", err)
	}
	a = &Alerts{URL: u, Timeout: 5 * time.Second}
	if _, err := a.Check(context.Background()); err == nil {
		t.Error("the system's roots trusted the test server")
	}
}

// otherCA is a self-signed CA certificate in PEM that signed nothing.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestAlertsReplyIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
		item := []byte(`{"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"firing"},"value":[1764000000,"1"]},`)
		for n := 0; n <= MaxReply/len(item)+1; n++ {
			if _, err := w.Write(item); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	_, err := (&Alerts{URL: u, Timeout: 10 * time.Second}).Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the reply is larger than 4 MiB") {
		t.Errorf("err = %v", err)
	}
}

func TestNewAlerts(t *testing.T) {
	c := config.Default().Blockers.Prometheus
	if err := c.URL.UnmarshalText([]byte("https://prom:9090")); err != nil {
		t.Fatal(err)
	}
	c.Username, c.PasswordFile, c.CAFile = "kured", "/p", "/ca.pem"
	a := NewAlerts(c)
	if a.URL.Host != "prom:9090" || a.Username != "kured" || a.PasswordFile != "/p" || a.CAFile != "/ca.pem" || a.Timeout != 30*time.Second {
		t.Errorf("NewAlerts = %+v", a)
	}
}
