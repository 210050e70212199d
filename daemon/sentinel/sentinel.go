// Package sentinel tells whether the host needs a reboot: a file whose
// existence says so (watched with inotify on its directory, and re-checked
// now and then), or a command whose exit code says so. A command that is
// missing, fails to start or runs past its timeout is an error, never a
// "reboot needed".
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kured-host/kured-host/daemon/host"
)

// Checker answers whether a reboot is needed now.
type Checker interface {
	RebootRequired(ctx context.Context) (bool, error)
	String() string
}

// File is a sentinel file: a reboot is needed while it exists.
type File struct{ Path string }

var _ Checker = File{}

// RebootRequired reports whether the file exists.
func (f File) RebootRequired(context.Context) (bool, error) {
	_, err := os.Stat(f.Path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("sentinel file: %w", err)
}

func (f File) String() string { return f.Path }

// Command is a sentinel command (an argv, no shell): a reboot is needed
// when it exits with one of RebootCodes.
type Command struct {
	Argv        []string
	RebootCodes []int
	Timeout     time.Duration
}

var _ Checker = Command{}

// ErrCommand marks a sentinel command that could not give an answer.
var ErrCommand = errors.New("sentinel command failed")

// RebootRequired runs the command (host.Command: its process group is
// killed after Timeout, a process it leaves behind holding its output is
// not waited for, and its output is kept bounded and escaped).
func (c Command) RebootRequired(ctx context.Context) (bool, error) {
	res, err := host.Command{Argv: c.Argv, Timeout: c.Timeout}.Run(ctx)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return slices.Contains(c.RebootCodes, 0), nil
	case errors.Is(err, host.ErrTimeout):
		return false, fmt.Errorf("%w: %s did not finish within %s", ErrCommand, c, c.Timeout)
	case errors.As(err, &exit) && res.ExitCode >= 0:
		return slices.Contains(c.RebootCodes, res.ExitCode), nil
	}
	return false, fmt.Errorf("%w: %v", ErrCommand, err)
}

func (c Command) String() string { return strings.Join(c.Argv, " ") }

// Watch reports the sentinel's state through report after every check: at
// once, on each inotify event for the file, and every period (callers act
// on changes). A file is watched with inotify on its directory (created, renamed
// into place, removed) and re-checked every period in case an event was
// missed; a command runs every period. Errors are reported too (and are
// never a "reboot needed"). Watch returns when ctx ends.
func Watch(ctx context.Context, c Checker, period time.Duration, log *slog.Logger, report func(needed bool, err error)) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if f, ok := c.(File); ok {
		w, err := fsnotify.NewWatcher()
		if err == nil {
			defer w.Close()
			if err = w.Add(filepath.Dir(f.Path)); err == nil {
				events, errs = w.Events, w.Errors
			}
		}
		if err != nil {
			log.Warn("cannot watch the sentinel's directory; checking every period only", "dir", filepath.Dir(f.Path), "period", period, "err", err)
		}
	}
	base := ""
	if f, ok := c.(File); ok {
		base = filepath.Base(f.Path)
	}
	check := func() {
		needed, err := c.RebootRequired(ctx)
		if ctx.Err() == nil {
			report(needed, err)
		}
	}
	check()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if filepath.Base(ev.Name) == base {
				check()
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			log.Warn("sentinel watch", "err", err)
			check()
		}
	}
}
