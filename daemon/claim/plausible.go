package claim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrImplausible marks a claim that parses but cannot be believed: a
// timestamp too far in the future, or, while it is active, a recorded
// group value that its Node's labels contradict. It is an ErrUnparsable
// (errors.Is), so that everything that fails safe on a claim it cannot
// read does so on this one too.
var ErrImplausible error = implausible{}

type implausible struct{}

func (implausible) Error() string { return "implausible claim" }

// Is makes ErrImplausible an ErrUnparsable.
func (implausible) Is(target error) bool { return target == ErrUnparsable }

// Plausible distrusts another node's claim: it returns p unchanged, or,
// when the claim cannot be believed, marked unreadable (Err wraps
// ErrImplausible, hence ErrUnparsable) with the fail-safe content of a
// claim that cannot be parsed: concurrency 1 and, when active, phase
// unknown; its recorded Groups are kept, so that it still counts in them
// (and in its Node's current labels). A claim that is already unreadable
// is returned as it is.
//
// A claim cannot be believed when
//
//   - its since, updated or acquired time is more than tolerance ahead of
//     serverNow, the API server's clock as this node estimates it (since
//     is the server's time; updated and acquired are the owner's clock,
//     within tolerance of the server's while time synchronisation works);
//     without this, a holding claim acquired in the future is never as old
//     as an alarm age or the TTL;
//   - it is active (entering or holding) and one of its recorded group
//     values differs from its Node's current label for that key, or the
//     Node no longer has that label: relabelled while active, or a node
//     counting itself in a group it is not in. A label the claim did not
//     record is not a reason. A waiting claim's groups are rewritten when
//     it announces and count for no one, so they are not checked.
//
// Distrusting only ever makes the reader stricter: an unreadable active
// claim counts as holding with concurrency 1 and is never counted out by
// the TTL; an unreadable waiting one is only left out of the queue. A node
// does not distrust its own claim.
func Plausible(p Participant, serverNow time.Time, tolerance time.Duration) Participant {
	if p.Err != nil {
		return p
	}
	var why, future []string
	c := p.Claim
	for _, t := range []struct {
		field string
		at    *time.Time
	}{{"since", &c.Since}, {"updated", &c.Updated}, {"acquired", c.Acquired}} {
		if t.at == nil {
			continue
		}
		if ahead := t.at.Sub(serverNow); ahead > tolerance {
			future = append(future, fmt.Sprintf("%s is %s", t.field, roughly(ahead, tolerance)))
		}
	}
	if len(future) > 0 {
		why = append(why, fmt.Sprintf("%s ahead of the API server's clock, more than the clock tolerance of %s: this host's or that node's clock is wrong, or the claim is forged",
			strings.Join(future, " and "), tolerance))
	}
	if c.State.Active() {
		why = append(why, groupsContradicted(p)...)
	}
	if len(why) == 0 {
		return p
	}
	p.Claim, p.Err = failSafe(c, fmt.Errorf("%w: %s", ErrImplausible, strings.Join(why, "; ")))
	return p
}

// roughly rounds d, which is more than tolerance, for a message: to the
// second from a minute up, else to the millisecond, as long as it still
// shows as more than tolerance.
func roughly(d, tolerance time.Duration) time.Duration {
	for _, unit := range []time.Duration{time.Second, time.Millisecond} {
		if r := d.Round(unit); r > tolerance && (unit < time.Second || d >= time.Minute) {
			return r
		}
	}
	return d
}

// groupsContradicted lists the recorded groups of p that its Node's
// labels contradict, in the order of their keys.
func groupsContradicted(p Participant) []string {
	keys := make([]string, 0, len(p.Claim.Groups))
	for k := range p.Claim.Groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var why []string
	for _, k := range keys {
		rec := p.Claim.Groups[k]
		cur, ok := p.Labels[k]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("it recorded group %s=%q but the node has no %s label: relabelled while %s, or forged", quoted(k), rec, quoted(k), p.Claim.State))
		case cur != rec:
			why = append(why, fmt.Sprintf("it recorded group %s=%q but the node's label is %q: relabelled while %s, or forged", quoted(k), rec, cur, p.Claim.State))
		}
	}
	return why
}

// quoted is s, or s in Go quotes when it has anything but printable
// characters: a key from another node's claim may carry terminal escapes.
func quoted(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) || r == ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

// ClockTolerance is the tolerance that follows from the lock's ages (the
// rule config.LockConfig.ClockTolerance states): half the smallest of the
// entering alarm age, the holder alarm age and the TTL, those that are on;
// from says which, for messages ("half of lock.ttl (4m0s)").
func ClockTolerance(enteringAlarmAge, alarmAge, ttl time.Duration) (tolerance time.Duration, from string) {
	smallest, why := enteringAlarmAge, "lock.entering_alarm_age"
	if alarmAge > 0 && (alarmAge < smallest || smallest <= 0) {
		smallest, why = alarmAge, "lock.alarm_age"
	}
	if ttl > 0 && (ttl <= smallest || smallest <= 0) {
		smallest, why = ttl, "lock.ttl"
	}
	return smallest / 2, fmt.Sprintf("half of %s (%s)", why, smallest)
}
