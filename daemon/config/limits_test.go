package config

import (
	"slices"
	"testing"

	"github.com/kured-host/kured-host/daemon/claim"
)

func TestLimits(t *testing.T) {
	got := Default().Lock.Limits()
	want := claim.Limits{Concurrency: 1, Groups: []claim.GroupLimit{{Label: ZoneLabel, Max: 1}}}
	if got.Concurrency != want.Concurrency || !slices.Equal(got.Groups, want.Groups) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
