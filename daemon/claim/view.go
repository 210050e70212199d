package claim

import "time"

// These expose the rules' view of a snapshot to readers that show it
// rather than act on it (kured-host status), so that they count exactly
// as the lock does.

// Active reports whether p takes a unit of capacity in the snapshot: an
// entering or holding claim (one that cannot be read counts as holding),
// unless the optional TTL (ttl > 0) counts out a readable holder whose
// slot is older than ttl.
func (p Participant) Active(now time.Time, ttl time.Duration) bool { return p.active(now, ttl) }

// Values are the values of label under which p counts: the one recorded
// in its claim when it announced, and the node's current one when it
// differs. None means the node does not have the label: that group rule
// does not limit it.
func (p Participant) Values(label string) []string { return p.values(label) }

// QueueOrder compares participants in queue order: earlier `since` first,
// then the name.
func QueueOrder(a, b Participant) int { return byQueueOrder(a, b) }

// Strictest is the smallest limit that any of ls sets for the rule of
// label ("" for the global concurrency, else that group label's max per
// value), and the index of the first Limits that sets it; index is -1 when
// none does.
func Strictest(label string, ls []Limits) (limit, index int) {
	index = -1
	d := domain{label: label}
	for i, l := range ls {
		if v, ok := d.limit([]Limits{l}); ok && (index < 0 || v < limit) {
			limit, index = v, i
		}
	}
	return limit, index
}
