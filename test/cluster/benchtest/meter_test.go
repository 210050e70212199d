package benchtest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kured-host/kured-host/daemon/claim"
)

// meter counts what a strategy's clients receive: the bytes of every
// reply, and the events and bytes on their watches (the audit log counts
// a watch once, when it starts, not the events it then carries).
type meter struct {
	events, bytes, all atomic.Int64
	// byKind is the bytes received by kind of request (see kindOf).
	byKind sync.Map // string → *atomic.Int64
}

type meterSnapshot struct {
	events, bytes, all int64
	byKind             map[string]int64
}

func (m *meter) snapshot() meterSnapshot {
	s := meterSnapshot{m.events.Load(), m.bytes.Load(), m.all.Load(), map[string]int64{}}
	m.byKind.Range(func(k, v any) bool {
		s.byKind[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return s
}

func (s meterSnapshot) sub(o meterSnapshot) meterSnapshot {
	d := meterSnapshot{s.events - o.events, s.bytes - o.bytes, s.all - o.all, map[string]int64{}}
	for k, v := range s.byKind {
		if v-o.byKind[k] != 0 {
			d.byKind[k] = v - o.byKind[k]
		}
	}
	return d
}

func (m *meter) kind(k string) *atomic.Int64 {
	c, _ := m.byKind.LoadOrStore(k, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// kindOf names a request by what it asks for: the verb as the audit log
// has it, one Node or many, whole or metadata only, and the selectors.
// placeValue is the value in a selector of the waiting claims ahead of a
// place (claim.AheadSelector).
var placeValue = regexp.MustCompile(`(` + regexp.QuoteMeta(claim.SinceLabel) + `[<>])[0-9]+`)

func kindOf(r *http.Request) string {
	q := r.URL.Query()
	verb := strings.ToLower(r.Method)
	what := path.Base(r.URL.Path) // a collection, or one object's name
	if strings.Contains(r.URL.Path, "/nodes/") {
		what = "node"
	}
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		verb = "watch"
	case verb == "get" && what != "node":
		verb = "list"
	}
	if strings.Contains(r.Header.Get("Accept"), "PartialObjectMetadata") {
		what += " (metadata)"
	}
	if v := q.Get("labelSelector"); v != "" {
		// Not each node's place: one kind.
		what += " label=" + placeValue.ReplaceAllString(v, "$1…")
	}
	if v := q.Get("fieldSelector"); v != "" {
		what += " field=" + strings.SplitN(v, "=", 2)[0] // not the name: one kind
	}
	if q.Get("limit") != "" {
		what += " limit"
	}
	if q.Get("resourceVersion") == "0" {
		what += " rv=0"
	}
	return verb + " " + what
}

// client returns a client for cfg that sends userAgent (the audit log is
// filtered by it) and counts its watch traffic in m. tune applies a
// strategy's client settings (kube.Tune for kured-host's, client-go's
// defaults with kured's rate limit for the baseline).
func (m *meter) client(cfg *rest.Config, userAgent string, tune func(*rest.Config)) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(m.config(cfg, userAgent, tune))
}

// metadata is client's metadata-only twin.
func (m *meter) metadata(cfg *rest.Config, userAgent string, tune func(*rest.Config)) (metadata.Interface, error) {
	return metadata.NewForConfig(m.config(cfg, userAgent, tune))
}

func (m *meter) config(cfg *rest.Config, userAgent string, tune func(*rest.Config)) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	tune(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return meterTransport{rt, m} })
	return cfg
}

type meterTransport struct {
	rt http.RoundTripper
	m  *meter
}

func (t meterTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	k := t.m.kind(kindOf(r))
	if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
		resp.Body = &watchBody{ReadCloser: resp.Body, m: t.m, kind: k,
			proto: strings.Contains(resp.Header.Get("Content-Type"), "protobuf")}
	} else {
		resp.Body = countingBody{resp.Body, &t.m.all, k}
	}
	return resp, nil
}

// countingBody counts the bytes of a reply.
type countingBody struct {
	io.ReadCloser
	n, kind *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	b.kind.Add(int64(n))
	return n, err
}

// watchBody counts the bytes and the events of a watch stream: one JSON
// document per line, or length-prefixed protobuf frames.
type watchBody struct {
	io.ReadCloser
	m     *meter
	kind  *atomic.Int64
	proto bool
	// frame: bytes of the length prefix read so far, and bytes left of
	// the current protobuf frame.
	prefix []byte
	left   int
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.m.bytes.Add(int64(n))
	b.m.all.Add(int64(n))
	b.kind.Add(int64(n))
	if b.proto {
		b.frames(p[:n])
	} else {
		b.m.events.Add(int64(bytes.Count(p[:n], []byte{'\n'})))
	}
	return n, err
}

func (b *watchBody) frames(p []byte) {
	for len(p) > 0 {
		if b.left > 0 {
			k := min(b.left, len(p))
			b.left -= k
			p = p[k:]
			continue
		}
		k := min(4-len(b.prefix), len(p))
		b.prefix = append(b.prefix, p[:k]...)
		p = p[k:]
		if len(b.prefix) == 4 {
			b.left = int(binary.BigEndian.Uint32(b.prefix))
			b.prefix = b.prefix[:0]
			b.m.events.Add(1)
		}
	}
}
