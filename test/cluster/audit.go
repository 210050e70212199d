package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// auditPolicy logs every request at level Metadata (who, what, no
// bodies). The RequestReceived stage is left out; ResponseStarted is kept
// because a long-running request (a watch) reaches ResponseComplete only
// when it ends, which may be after the test: the reader counts such a
// request at ResponseStarted and skips its ResponseComplete, so each
// request counts once.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditFlags writes the audit policy and returns the API server's flags
// for a JSON audit log in cp.Dir, written before each request's reply
// (mode blocking) and never rotated.
func (cp *ControlPlane) auditFlags() ([]string, error) {
	policy := filepath.Join(cp.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	cp.AuditLogPath = filepath.Join(cp.Dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + cp.AuditLogPath,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0", // no rotation: one file to read
	}, nil
}

// Request is one API request as the API server's audit log has it.
type Request struct {
	Time        time.Time // when the API server received it
	User        string
	Groups      []string
	UserAgent   string
	Verb        string // get, list, watch, create, update, patch, delete, ...
	Resource    string // "" for a non-resource URL such as /version
	Subresource string
	Namespace   string
	Name        string
	URI         string
	Code        int // the reply's status code (0 for a watch, counted when it starts)
	// Took is the time the API server spent on it, from receiving it to
	// the response complete (queue waits included), as its audit log
	// records them; 0 for a long-running request, counted when its
	// response started.
	Took time.Duration
}

// Read reports whether the request only reads: get, list or watch.
func (r Request) Read() bool { return r.Verb == "get" || r.Verb == "list" || r.Verb == "watch" }

// auditEvent is the part of an audit.k8s.io/v1 Event the reader uses.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp  time.Time `json:"stageTimestamp"`
}

// AuditLog reads the API server's audit log as it grows.
type AuditLog struct {
	cp   *ControlPlane
	path string

	mu      sync.Mutex
	off     int64
	started map[string]bool // long-running requests counted at ResponseStarted
}

// markerPrefix names the Namespace that AuditLog.Requests asks for, to
// know when the log has caught up; markers are left out of the results.
const markerPrefix = "kured-host-audit-marker-"

var markerSeq atomic.Int64

// AuditLog returns a reader of the audit log from its beginning; the
// control plane must have been started with Options.AuditLog.
func (cp *ControlPlane) AuditLog() (*AuditLog, error) {
	if cp.AuditLogPath == "" {
		return nil, errors.New("audit log: the control plane was started without Options.AuditLog")
	}
	return &AuditLog{cp: cp, path: cp.AuditLogPath, started: map[string]bool{}}, nil
}

// Requests returns the requests logged since the previous call (or since
// the beginning), one per request, in the order the API server finished
// them. It first makes a marker request and reads until the marker is in
// the log, so every request answered before the call is included.
func (a *AuditLog) Requests(ctx context.Context) (Requests, error) {
	marker := fmt.Sprintf("%s%d", markerPrefix, markerSeq.Add(1))
	_, err := a.cp.Admin.CoreV1().Namespaces().Get(ctx, marker, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("audit log: marker request: %w", err)
	}
	var out Requests
	for {
		got, seen, err := a.read(marker)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if seen {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("audit log: marker %s not logged: %w", marker, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// read parses the complete lines added since the last read.
func (a *AuditLog) read(marker string) (Requests, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if err != nil {
		return nil, false, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(a.off, io.SeekStart); err != nil {
		return nil, false, fmt.Errorf("audit log: %w", err)
	}
	br := bufio.NewReaderSize(f, 1<<20)
	var out Requests
	seen := false
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, seen, nil // an incomplete last line is read next time
		}
		if err != nil {
			return nil, false, fmt.Errorf("audit log: %w", err)
		}
		a.off += int64(len(line))
		r, ok, err := a.parse(line)
		if err != nil {
			return nil, false, err
		}
		switch {
		case !ok:
		case r.Resource == "namespaces" && strings.HasPrefix(r.Name, markerPrefix):
			seen = seen || r.Name == marker
		default:
			out = append(out, r)
		}
	}
}

// parse turns one event into a Request; ok is false for the final event
// of a request already counted when its response started.
func (a *AuditLog) parse(line []byte) (r Request, ok bool, err error) {
	var ev auditEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return Request{}, false, fmt.Errorf("audit log: %w in %.200s", err, line)
	}
	switch ev.Stage {
	case "ResponseStarted":
		a.started[ev.AuditID] = true
	case "ResponseComplete", "Panic":
		if a.started[ev.AuditID] {
			delete(a.started, ev.AuditID)
			return Request{}, false, nil
		}
	default:
		return Request{}, false, nil
	}
	r = Request{
		Time: ev.RequestReceived, User: ev.User.Username, Groups: ev.User.Groups,
		UserAgent: ev.UserAgent, Verb: ev.Verb, URI: ev.RequestURI,
	}
	if o := ev.ObjectRef; o != nil {
		r.Resource, r.Subresource, r.Namespace, r.Name = o.Resource, o.Subresource, o.Namespace, o.Name
	}
	if ev.ResponseStatus != nil {
		r.Code = ev.ResponseStatus.Code
	}
	if ev.Stage == "ResponseComplete" {
		r.Took = ev.StageTimestamp.Sub(ev.RequestReceived)
	}
	return r, true, nil
}

// Requests are requests from the audit log, with ways to count them.
type Requests []Request

// Where keeps the requests f accepts.
func (rs Requests) Where(f func(Request) bool) Requests {
	var out Requests
	for _, r := range rs {
		if f(r) {
			out = append(out, r)
		}
	}
	return out
}

// Between keeps the requests received in [from, to].
func (rs Requests) Between(from, to time.Time) Requests {
	return rs.Where(func(r Request) bool { return !r.Time.Before(from) && !r.Time.After(to) })
}

// Count counts the requests by key: by verb, user agent, user, ...
func (rs Requests) Count(key func(Request) string) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		out[key(r)]++
	}
	return out
}

// Verb, UserAgent and User are keys for Count.
func Verb(r Request) string      { return r.Verb }
func UserAgent(r Request) string { return r.UserAgent }
func User(r Request) string      { return r.User }

// Reads counts the get, list and watch requests.
func (rs Requests) Reads() int { return len(rs.Where(Request.Read)) }

// PeakPerSecond is the most requests received within any one second, and
// when that second began.
func (rs Requests) PeakPerSecond() (int, time.Time) {
	ts := make([]time.Time, len(rs))
	for i, r := range rs {
		ts[i] = r.Time
	}
	slices.SortFunc(ts, time.Time.Compare)
	peak, at := 0, time.Time{}
	j := 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= time.Second {
			j++
		}
		if n := i - j + 1; n > peak {
			peak, at = n, ts[j]
		}
	}
	return peak, at
}
