package doctor

import (
	"fmt"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
)

// ClockWarn is the offset to the API server's clock above which check
// warns. A host synchronised by NTP is within milliseconds of the API
// server; the measurement (the Date header has whole seconds, taken at the
// middle of a round trip) is within about a second. Thirty seconds means
// time synchronisation is not working, long before the offset matters.
const ClockWarn = 30 * time.Second

// ClockBounds are the offsets to the API server's clock above which check
// warns and fails.
type ClockBounds struct {
	Warn, Fail time.Duration
	// Why names what the fail bound protects.
	Why string
}

// BoundsFor derives the bounds from the lock's settings: check fails above
// the stated clock tolerance (config.LockConfig.ClockTolerance).
//
// The slot protocol's safety takes no clock (design/claims.md: an active
// claim is never ignored because of its age), and the queue order uses the
// API server's clock. Host clocks enter only where one node judges the age
// of another's claim from timestamps the other wrote with its own clock:
// the entering alarm (lock.entering_alarm_age, 10m), the holder alarm
// (lock.alarm_age, 1h) and, if turned on, lock.ttl. A node whose clock
// is ahead of another's by d sees that node's claims d older than they
// are: alarms fire early and, with a TTL, a holder is counted out early,
// which lets one node too many go down. check sees only this host's offset
// to the API server; two hosts each within B of it may be 2B apart. So it
// fails above half the smallest of those ages: then no claim can look as
// old as an alarm age (or the TTL) when it is written. The other nodes do
// not believe this host's claims when their times are further ahead of
// the API server than that.
func BoundsFor(l config.LockConfig) ClockBounds {
	tolerance, why := l.ClockTolerance()
	b := ClockBounds{Warn: ClockWarn, Fail: tolerance, Why: why}
	if b.Fail < b.Warn {
		b.Warn = b.Fail
	}
	return b
}

// Clock classifies the offset of the API server's clock from this host's
// (positive: the server is ahead), as measured from the Date header of its
// replies; seen is false when no reply carried one.
func Clock(offset time.Duration, seen bool, b ClockBounds) Finding {
	const check = "clock"
	if !seen {
		return finding(Warn, check, "no reply from the API server carried a Date header: the offset to its clock is unknown")
	}
	abs := offset
	if abs < 0 {
		abs = -abs
	}
	// The Date header has whole seconds: show no more precision.
	what := "this host is within a second of the API server"
	if abs >= time.Second {
		where := "ahead of"
		if offset > 0 {
			where = "behind"
		}
		what = fmt.Sprintf("this host is %s %s the API server", abs.Round(time.Second), where)
	}
	switch {
	case abs > b.Fail:
		return finding(Fail, check, "%s, more than %s (%s): other nodes' claims look older or younger than they are, "+
			"so alarms (and lock.ttl) misfire, and the other nodes may not believe this node's claim (it then counts as holding a slot, with concurrency 1); "+
			"fix time synchronisation (timedatectl, chronyc tracking)", what, b.Fail, b.Why)
	case abs > b.Warn:
		return finding(Warn, check, "%s, more than %s: is time synchronisation working? (timedatectl); check fails above %s (%s)",
			what, b.Warn, b.Fail, b.Why)
	}
	return finding(OK, check, "%s (warn above %s, fail above %s)", what, b.Warn, b.Fail)
}
