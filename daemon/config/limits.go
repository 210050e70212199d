package config

import "github.com/kured-host/kured-host/daemon/claim"

// Limits is the lock section as the limits a node publishes in its claim.
func (l LockConfig) Limits() claim.Limits {
	out := claim.Limits{Concurrency: l.Concurrency}
	for _, g := range l.Groups {
		out.Groups = append(out.Groups, claim.GroupLimit{Label: g.Label, Max: g.Max})
	}
	return out
}
