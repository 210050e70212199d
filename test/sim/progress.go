package sim

import (
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
	"github.com/kured-host/kured-host/daemon/queue"
)

// TakeBound is how soon a waiting node whose daemon runs takes a slot it
// may take (docs/claims.md, "No idle slot"): at most this long after the
// slot became free to it, after its daemon (re)started, after the API
// server came back from an outage, or after its next look once an
// operator lifted what kept it out, whichever is later.
const TakeBound = 10 * time.Second

// watchProgress checks, every second, that no slot stays free while a
// waiting node that may take it does not: eligible in the queue as every
// node computes it from the true state (the product's own rules), with
// its daemon running, for longer than TakeBound without announcing.
// Waiting nodes whose daemon is gone are passed over as the others pass
// them over: after lock.waiting_grace.
func (w *World) watchProgress() {
	since := map[string]time.Time{} // node -> eligible since
	// The claim's own place for since: a claim made again (the admin
	// removed it, even in the instant it took a slot, between two
	// looks) is a new wait, judged from its own eligibility.
	joined := map[string]time.Time{}
	var lastOutage time.Time
	var lastRV uint64
	var ps []claim.Participant
	var places map[string]time.Time // node -> its claim's since, from ps
	var reader queue.Reader
	for sleep(w.ctx, time.Second) == nil {
		now := time.Now()
		w.mu.Lock()
		if w.outageUntil.After(now) || w.outageUntil.Equal(now) {
			lastOutage = now
		}
		w.mu.Unlock()
		if rv := w.store.RV(); rv != lastRV || ps == nil {
			// The queue changes only with a write.
			lastRV = rv
			ps = reader.Participants(w.store.Nodes(), now, 5*time.Minute)
			places = make(map[string]time.Time, len(ps))
			for _, p := range ps {
				places[p.Name] = p.Claim.Since
			}
		}
		live := map[string]time.Time{} // node -> its daemon's start
		for _, h := range w.Hosts {
			h.mu.Lock()
			if h.up && h.daemon != nil && !h.dead {
				live[h.Name] = h.daemon.started
			}
			h.mu.Unlock()
		}
		grace := w.Hosts[0].Cfg.Lock.WaitingGrace.Std()
		q := claim.Eligibility(ps, now, 0, func(name string) bool {
			_, ok := live[name]
			return !ok && now.Sub(since[name]) > grace && !since[name].IsZero()
		})
		for _, name := range q.Waiting {
			if !q.Eligible(name) {
				delete(since, name)
				continue
			}
			if since[name].IsZero() || !joined[name].Equal(places[name]) {
				since[name], joined[name] = now, places[name]
			}
			started, ok := live[name]
			if !ok {
				continue
			}
			excused, lifted := w.orders.excused(name, now)
			if excused {
				continue
			}
			wait, recovered := now.Sub(since[name]), now.Sub(maxTime(started, lastOutage, lifted))
			if wait > TakeBound && recovered > TakeBound && !w.reported(name, since[name]) {
				w.violate("%s may take a free slot since %s and has not, %s later (its daemon runs)", name, fmtDur(since[name].Sub(w.start)), wait.Round(time.Second))
			}
		}
		for name := range since {
			if !q.Eligible(name) {
				delete(since, name)
			}
		}
	}
}

// reported reports each idle episode once.
func (w *World) reported(node string, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := node + since.String()
	if w.idle[key] {
		return true
	}
	w.idle[key] = true
	return false
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
