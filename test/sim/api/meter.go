package api

import (
	"maps"
	"regexp"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Meter counts what the API serves the nodes' daemons, by second of the
// (virtual) time: requests, and the bytes of the replies and of the watch
// events, as their objects' protobuf size (the wire size of a protobuf
// client; JSON is larger by a roughly constant factor). Set Store.Meter
// before anything runs; nil counts nothing.
type Meter struct {
	mu        sync.Mutex
	perSecond map[int64]int
	requests  map[string]int
	lists     map[string]int
	bytes     map[string]int64
	kinds     map[string]KindCount
	events    map[string]int64 // watch events' bytes, by the kind of watch
}

// KindCount is what one kind of request cost: how many, and the bytes of
// their replies.
type KindCount struct {
	Requests int
	Bytes    int64
	// More counts the replies that were a page with more behind it (a
	// limited List that said to continue).
	More int
}

// NewMeter returns an empty Meter.
func NewMeter() *Meter {
	return &Meter{perSecond: map[int64]int{}, requests: map[string]int{}, lists: map[string]int{}, bytes: map[string]int64{}, kinds: map[string]KindCount{}, events: map[string]int64{}}
}

// Kinds is what each kind of request has cost so far (verb, resource and
// the shape of the selectors: numbers as #).
func (m *Meter) Kinds() map[string]KindCount {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.kinds)
}

// Lists is how many Lists identity who has made so far.
func (m *Meter) Lists(who string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lists[who]
}

var digits = regexp.MustCompile(`[0-9]+`)

// kindOf names a request's kind for Kinds.
func kindOf(r Request, o *metav1.ListOptions) string {
	k := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		k += "/" + r.Subresource
	}
	if r.Verb == "get" && r.Name != "" {
		k += " (one)"
	}
	if o != nil {
		if o.LabelSelector != "" {
			k += " label=" + digits.ReplaceAllString(o.LabelSelector, "#")
		}
		if o.FieldSelector != "" {
			k += " field=" + strings.SplitN(o.FieldSelector, "=", 2)[0]
		}
		if o.Limit > 0 {
			k += " limit"
		}
		if o.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
			k += " exact"
		}
	}
	return k
}

func size(obj runtime.Object) int64 {
	if s, ok := obj.(interface{ Size() int }); ok && obj != nil {
		return int64(s.Size())
	}
	return 0
}

func (m *Meter) request(who, kind string, reply runtime.Object) {
	if m == nil {
		return
	}
	n := size(reply)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.perSecond[time.Now().Unix()]++
	m.requests[who]++
	if strings.HasPrefix(kind, "list ") {
		m.lists[strings.SplitN(who, "#", 2)[0]]++
	}
	m.bytes[who] += n
	k := m.kinds[kind]
	k.Requests++
	k.Bytes += n
	if l, ok := reply.(metav1.ListInterface); ok && l.GetContinue() != "" {
		k.More++
	}
	m.kinds[kind] = k
}

func (m *Meter) event(who, watchKind string, obj runtime.Object) {
	if m == nil {
		return
	}
	n := size(obj)
	who, _, _ = strings.Cut(who, "#") // one process's watch
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bytes[who] += n
	k := m.kinds["watch events"]
	k.Bytes += n
	m.kinds["watch events"] = k
	m.events[watchKind] += n
}

// EventBytes is the bytes of the watch events delivered so far, by the
// kind of the watch (as Kinds names its request).
func (m *Meter) EventBytes() map[string]int64 {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.events)
}

// MeterFigures is what a Meter counted.
type MeterFigures struct {
	Requests    int
	PeakPerSec  int
	PeakAt      time.Time
	Seconds     int // from the first request to the last
	Bytes       int64
	Identities  int
	MaxRequests int // the most requests one identity made
}

// Figures sums up what m counted.
func (m *Meter) Figures() MeterFigures {
	m.mu.Lock()
	defer m.mu.Unlock()
	var f MeterFigures
	var first, last int64
	for s, n := range m.perSecond {
		f.Requests += n
		if n > f.PeakPerSec {
			f.PeakPerSec, f.PeakAt = n, time.Unix(s, 0)
		}
		if first == 0 || s < first {
			first = s
		}
		last = max(last, s)
	}
	if f.Requests > 0 {
		f.Seconds = int(last-first) + 1
	}
	for _, n := range m.requests {
		f.Identities++
		f.MaxRequests = max(f.MaxRequests, n)
	}
	for _, b := range m.bytes {
		f.Bytes += b
	}
	return f
}
