package config

import (
	"fmt"
	"time"
)

// ClockTolerance is the stated clock tolerance: how far a host's clock may
// be from the API server's before kured-host calls it wrong. It is half
// the smallest of lock.entering_alarm_age, lock.alarm_age and (when on)
// lock.ttl; from says which, for messages ("half of lock.ttl (4m0s)").
//
// Host clocks enter only where one node judges the age of another's claim
// from timestamps the other wrote with its own clock: the alarms and the
// TTL. Two hosts each within the tolerance of the API server are within
// twice of it of each other, so no claim can look as old as an alarm age
// (or the TTL) when it is written. `kured-host check` fails on a host
// further than this from the API server, and the lock does not believe a
// claim of another node with a time further than this in the future
// (docs/claims.md).
func (l LockConfig) ClockTolerance() (tolerance time.Duration, from string) {
	smallest, why := l.EnteringAlarmAge.Std(), "lock.entering_alarm_age"
	if a := l.AlarmAge.Std(); a > 0 && (a < smallest || smallest <= 0) {
		smallest, why = a, "lock.alarm_age"
	}
	if t := l.TTL.Std(); t > 0 && (t <= smallest || smallest <= 0) {
		smallest, why = t, "lock.ttl"
	}
	return smallest / 2, fmt.Sprintf("half of %s (%s)", why, smallest)
}
