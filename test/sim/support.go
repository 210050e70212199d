package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kured-host/kured-host/test/sim/api"
)

// clientSet is every connection the world has handed out.
type clientSet struct {
	mu       sync.Mutex
	all      []*api.Client
	requests int
}

func (c *clientSet) Add(cl *api.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, cl)
}

// Forget drops what the fake clientsets recorded (they keep every
// request), counting the requests first.
func (c *clientSet) Forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.all {
		c.requests += len(cl.Kube.Actions())
		cl.Forget()
	}
}

func (c *clientSet) SeverAll() {
	c.Forget()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.all {
		cl.Sever()
	}
}

func (c *clientSet) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// logs keeps the last lines each host's daemon logged, with the virtual
// time, for the report of a failed run.
type logs struct {
	mu    sync.Mutex
	start time.Time
	lines map[string][]string
}

const keepLines = 400

func newLogs() *logs { return &logs{start: time.Now(), lines: map[string][]string{}} }

type hostLog struct {
	l    *logs
	host string
}

// For is the writer of host's log.
func (l *logs) For(host string) hostLog { return hostLog{l, host} }

func (h hostLog) Write(p []byte) (int, error) {
	line := fmt.Sprintf("%10s  %s", fmtDur(time.Since(h.l.start)), strings.TrimRight(string(p), "\n"))
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	ls := append(h.l.lines[h.host], line)
	if len(ls) > keepLines {
		ls = ls[len(ls)-keepLines:]
	}
	h.l.lines[h.host] = ls
	return len(p), nil
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, host := range slices.Sorted(maps.Keys(l.lines)) {
		fmt.Fprintf(&b, "--- %s (last %d lines)\n", host, len(l.lines[host]))
		for _, line := range l.lines[host] {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
