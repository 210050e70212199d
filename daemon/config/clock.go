package config

import (
	"time"

	"github.com/kured-host/kured-host/daemon/claim"
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
	return claim.ClockTolerance(l.EnteringAlarmAge.Std(), l.AlarmAge.Std(), l.TTL.Std())
}
