// Package version holds the build's version, set by the Makefile with
// -ldflags "-X ...": Version from git describe, Commit the full hash.
package version

import (
	"fmt"
	"runtime"
)

// Set at build time.
var (
	Version = "dev"
	Commit  = "unknown"
)

// String is the multi-line text that `kured-host version` prints.
func String() string {
	return fmt.Sprintf("kured-host %s\ncommit: %s\ngo: %s\nplatform: %s/%s\n",
		Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
