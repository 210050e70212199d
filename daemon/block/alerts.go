package block

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/redact"
)

// Alerts blocks while alerts are active, as kured does: it asks for the
// ALERTS series through the instant query API (GET <URL>/api/v1/query?
// query=ALERTS); alerts whose names match Filter are ignored, or, with
// MatchOnly, are the only ones that count; with FiringOnly, pending alerts
// (alertstate="pending") do not count.
//
// The query API only, never /api/v1/alerts, neither first nor as a
// fallback. Every backend that holds alerts answers PromQL for ALERTS
// (Prometheus, Thanos, Mimir, VictoriaMetrics fed by vmalert), whereas
// /api/v1/alerts is Prometheus's rule engine alone: VictoriaMetrics
// without vmalert behind it answers it with an empty list, so that a
// fallback after a failed query would let reboots through exactly when the
// backend is in trouble. One request, one answer: a query that fails
// blocks ("cannot tell").
//
// The URL may hold credentials: it is only ever shown redacted, in the
// errors too. The credential files are read at each request, so that a
// rotated secret is used without a restart; a file that cannot be read is
// an error, which blocks (Check). Their content is never shown.
type Alerts struct {
	URL        *url.URL
	Filter     *regexp.Regexp
	MatchOnly  bool
	FiringOnly bool
	// Username and PasswordFile are basic authentication; BearerTokenFile
	// holds a bearer token. Empty: none (a user name and password in the
	// URL still count, as net/http sends them).
	Username, PasswordFile, BearerTokenFile string
	// CAFile is a PEM bundle trusted instead of the system's roots.
	CAFile string
	// Timeout bounds each request.
	Timeout time.Duration
	// Client, if set and CAFile is not, is used as it is (tests).
	Client *http.Client

	mu     sync.Mutex
	caPEM  []byte       // CAFile's content when client was built
	client *http.Client // for CAFile
}

var _ Blocker = (*Alerts)(nil)

// NewAlerts is the blocker for c, which must have a URL.
func NewAlerts(c config.PrometheusConfig) *Alerts {
	return &Alerts{
		URL: c.URL.URL(), Filter: c.AlertFilterRegexp.Regexp(), MatchOnly: c.AlertFilterMatchOnly, FiringOnly: c.AlertFiringOnly,
		Username: c.Username, PasswordFile: c.PasswordFile, BearerTokenFile: c.BearerTokenFile, CAFile: c.CAFile,
		Timeout: c.Timeout.Std(),
	}
}

// Kind implements Blocker.
func (a *Alerts) Kind() string { return "alerts" }

// MaxReply bounds the reply read from Prometheus: the ALERTS series are far
// smaller, and whatever answers at the URL must not fill the memory.
const MaxReply = 4 << 20

// maxFile bounds a credential or CA file, for the same reason.
const maxFile = 1 << 20

// alertsQuery is the PromQL asked: one series per active alert, with the
// labels alertname and alertstate ("firing" or "pending"). The filters are
// applied here rather than in PromQL, so that Filter keeps Go's
// (unanchored) regular expression semantics, as in kured.
const alertsQuery = "ALERTS"

// queryResponse is the instant query API's reply. Result is decoded once
// ResultType says it is a vector (a scalar's is [time, "value"]).
type queryResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// sample is one series of an instant vector: its labels and [time, "value"].
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  []json.RawMessage `json:"value"`
}

// active reports whether the sample's value is not 0, as kured counts it:
// ALERTS is 1 for each active alert. A value that cannot be read counts,
// to be safe.
func (s sample) active() bool {
	var v string
	if len(s.Value) != 2 || json.Unmarshal(s.Value[1], &v) != nil {
		return true
	}
	f, err := strconv.ParseFloat(v, 64)
	return err != nil || f != 0
}

// Check implements Blocker.
func (a *Alerts) Check(ctx context.Context) (string, error) {
	series, err := a.query(ctx)
	if err != nil {
		return "", err
	}
	var names []string
	for _, s := range series {
		// A series without alertname is not an alert (kured skips it too).
		name, ok := s.Metric["alertname"]
		if !ok || !s.active() {
			continue
		}
		if a.FiringOnly && s.Metric["alertstate"] != "firing" {
			continue
		}
		if a.Filter != nil && a.Filter.MatchString(name) != a.MatchOnly {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	slices.Sort(names)
	return "active Prometheus alerts: " + strings.Join(names, ", "), nil
}

// queryURL is <URL>/api/v1/query?query=ALERTS. JoinPath keeps a path
// prefix (http://host/prometheus, Mimir's /prometheus). The URL's own
// query (a token some proxies want there) follows ours as written: ours
// comes first, so it is the one the server reads. No time parameter: the
// server evaluates at its own now; a node whose clock ran ahead by more
// than the lookback (5 minutes) would otherwise see no alert at all.
func (a *Alerts) queryURL() string {
	u := a.URL.JoinPath("api", "v1", "query")
	q := "query=" + url.QueryEscape(alertsQuery)
	if u.RawQuery != "" {
		q += "&" + u.RawQuery
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = q, false, "", ""
	return u.String()
}

// query asks for the ALERTS series, with a GET: every backend and
// read-only proxy takes it, and the query is one word (kured's Go client
// posts a form and falls back to GET). Every error names the URL redacted
// and never holds its secrets.
func (a *Alerts) query(ctx context.Context) ([]sample, error) {
	shown := redact.URL(a.URL)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("ask Prometheus at %s for alerts: %s", shown, fmt.Sprintf(format, args...))
	}
	client, err := a.httpClient()
	if err != nil {
		return nil, fail("%v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.queryURL(), nil)
	if err != nil {
		return nil, fail("%v", redact.Error(err, a.URL))
	}
	req.Header.Set("Accept", "application/json")
	if err := a.authorize(req); err != nil {
		return nil, fail("%v", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		// net/http's *url.Error repeats the request's URL, query and
		// user name included: keep only what went wrong.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("ask Prometheus at %s for alerts: %w", shown, redact.Error(err, a.URL))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxReply+1))
	if err != nil {
		return nil, fail("read the reply: %v", redact.Error(err, a.URL))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fail("%s", a.statusError(resp.StatusCode, body))
	}
	if len(body) > MaxReply {
		return nil, fail("the reply is larger than %d MiB; is this the URL of a Prometheus server?", MaxReply>>20)
	}
	var r queryResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fail("the reply is not Prometheus's JSON: %v", err)
	}
	if r.Status != "success" {
		return nil, fail("it answered %q: %q", clip(r.Status), a.serverText(r.Error))
	}
	if r.Data.ResultType != "vector" {
		return nil, fail("it answered a %q rather than an instant vector; is this the URL of a Prometheus server?", clip(r.Data.ResultType))
	}
	var series []sample
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		return nil, fail("the vector in the reply is not Prometheus's JSON: %v", err)
	}
	return series, nil
}

// statusError describes a reply other than 200 OK, with the error the
// query API gives in its JSON (400 bad query, 422 failed, 503 timed out).
func (a *Alerts) statusError(code int, body []byte) string {
	msg := fmt.Sprintf("it answered %d %s", code, http.StatusText(code))
	var r queryResponse
	if len(body) <= MaxReply && json.Unmarshal(body, &r) == nil && r.Error != "" {
		msg += fmt.Sprintf(": %q", a.serverText(r.Error))
	}
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		msg += "; check the credentials (blockers.prometheus.username and password_file, bearer_token_file, or those in the URL)"
	}
	return msg
}

// serverText is an error text from the server, with the URL's secrets
// hidden (VictoriaMetrics quotes the request's URI, query and all, in its
// errors), then clipped: clipping first could leave part of a secret.
func (a *Alerts) serverText(s string) string {
	return clip(redact.Text(s, a.URL))
}

// clip shortens text from outside for a one-line message.
func clip(s string) string {
	const most = 200
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// authorize sets the Authorization header from the credential files.
func (a *Alerts) authorize(req *http.Request) error {
	switch {
	case a.PasswordFile != "":
		pass, err := readSecret("blockers.prometheus.password_file", a.PasswordFile)
		if err != nil {
			return err
		}
		req.SetBasicAuth(a.Username, pass)
	case a.BearerTokenFile != "":
		token, err := readSecret("blockers.prometheus.bearer_token_file", a.BearerTokenFile)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return nil
}

// httpClient is Client, or one that trusts CAFile's certificates, built
// again when the file's content changes.
func (a *Alerts) httpClient() (*http.Client, error) {
	if a.CAFile == "" {
		if a.Client != nil {
			return a.Client, nil
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.client == nil {
			a.client = &http.Client{Timeout: a.Timeout}
		}
		return a.client, nil
	}
	const key = "blockers.prometheus.ca_file"
	pem, err := readFile(key, a.CAFile)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil && bytes.Equal(pem, a.caPEM) {
		return a.client, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", key, a.CAFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if a.client != nil {
		a.client.CloseIdleConnections()
	}
	a.client, a.caPEM = &http.Client{Transport: t, Timeout: a.Timeout}, pem
	return a.client, nil
}

// readSecret reads a password or token: the file's content without
// surrounding white space. Errors name key and file, never the content.
func readSecret(key, path string) (string, error) {
	data, err := readFile(key, path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(data))
	switch {
	case s == "":
		return "", fmt.Errorf("%s %s: the file is empty", key, path)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", fmt.Errorf("%s %s: the file has more than one line, or control characters", key, path)
	}
	return s, nil
}

// readFile reads a regular file of at most maxFile bytes.
func readFile(key, path string) ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		var perr *fs.PathError
		if errors.As(err, &perr) {
			err = perr.Err
		}
		return nil, fmt.Errorf("%s %s: %w", key, path, err)
	}
	// O_NONBLOCK: a FIFO must not hold the check up.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(errors.New("not a regular file"))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return fail(err)
	}
	if len(data) > maxFile {
		return fail(fmt.Errorf("larger than %d MiB", maxFile>>20))
	}
	return data, nil
}
