//go:build race

package queue

// underRace: the drive runs on one goroutine, so the race detector has
// nothing to find in it and slows it several times over; under -race
// (make unit) its rolls are left to make sim, which runs them without.
const underRace = true
