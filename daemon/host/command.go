package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Command is a program the daemon runs on the host (the sentinel, health
// and reboot commands): an argv without a shell, bounded in time and in
// the output it keeps.
type Command struct {
	Argv []string
	// Timeout bounds one run: the command, and every process it started
	// (its process group), is killed then. 0 leaves only the context.
	Timeout time.Duration
	// WaitDelay bounds the wait, after the command has exited or been
	// killed, for its output to end: a process it left behind (`sleep 60
	// &`) may hold its stdout open. 0 is DefaultWaitDelay.
	WaitDelay time.Duration
}

// DefaultWaitDelay is Command.WaitDelay's default.
const DefaultWaitDelay = time.Second

// MaxOutput is how much of a command's output is kept: its last bytes.
const MaxOutput = 2 << 10

// ErrTimeout means the command ran past its Timeout and was killed.
var ErrTimeout = errors.New("timed out")

// Result is what a run left.
type Result struct {
	// Output is the command's stdout and stderr together, safe to put
	// in an Event, a message, a log line or sd_notify's STATUS: its last
	// MaxOutput bytes ("(truncated) …" first when there was more), on one
	// line (line breaks shown as " | "), every other control character,
	// terminal escape or invalid byte escaped as in Go ("\x1b").
	Output string
	// ExitCode is the exit status, or -1 when the command did not exit
	// by itself (killed, or never started).
	ExitCode int
}

func (c Command) String() string { return strings.Join(c.Argv, " ") }

// Run runs the command and waits for it, at most Timeout and then
// WaitDelay. The error is nil when the command exited 0 (even if a
// process it left behind still held its output: that is not waited for);
// otherwise it names the command and says what happened, with the
// output: a non-zero exit (wrapping *exec.ExitError), ErrTimeout, or a
// failure to start. When ctx ends first, the error wraps ctx's.
func (c Command) Run(ctx context.Context) (Result, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return Result{ExitCode: -1}, errors.New("run command: no command")
	}
	parent := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	out := &tail{max: MaxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that a timeout kills what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cmp.Or(c.WaitDelay, DefaultWaitDelay)
	err := cmd.Run()
	res := Result{Output: out.String(), ExitCode: -1}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	with := ""
	if res.Output != "" {
		with = ": " + res.Output
	}
	var exit *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay) && res.ExitCode == 0:
		return res, nil
	case parent.Err() != nil:
		return res, fmt.Errorf("command %q: %w", c.String(), context.Cause(parent))
	case ctx.Err() != nil:
		return res, fmt.Errorf("command %q did not finish within %s (killed): %w%s", c.String(), c.Timeout, ErrTimeout, with)
	case errors.As(err, &exit):
		return res, fmt.Errorf("command %q: %w%s", c.String(), err, with)
	}
	return res, fmt.Errorf("run command %q: %w%s", c.String(), err, with)
}

// tail keeps the last bytes written to it, up to max (and a little more,
// to copy less often).
type tail struct {
	mu        sync.Mutex
	max       int
	b         []byte
	truncated bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p, t.truncated = p[len(p)-t.max:], true
		t.b = t.b[:0]
	}
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b, t.truncated = append(t.b[:0], t.b[len(t.b)-t.max:]...), true
	}
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > t.max {
		b, t.truncated = b[len(b)-t.max:], true
	}
	if t.truncated {
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:] // cut inside a character
		}
	}
	s := Printable(string(b))
	if t.truncated {
		s = "(truncated) …" + s
	}
	return s
}

// Printable makes text from a program safe to show anywhere a line of
// text goes (an Event, a message, a log line, sd_notify's STATUS): spaces
// at either end trimmed, line breaks shown as " | ", tabs as spaces, and
// every other character that is not printable escaped (Escape).
func Printable(s string) string {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(s), "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = Escape(strings.ReplaceAll(l, "\t", " "))
	}
	return strings.Join(lines, " | ")
}

// Escape replaces every character of s that is not printable (control
// characters, terminal escapes, bidirectional overrides, bytes that are
// not UTF-8) with its Go escape ("\x1b"), so that text from outside
// cannot act on the terminal or the log it is shown in.
func Escape(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

func isPrintable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false
			}
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// CommandRebooter reboots by running a command (reboot.method =
// "command"), an argv without a shell.
type CommandRebooter struct {
	Argv []string
	// Timeout bounds the command (reboot.timeout); 0 is a minute.
	Timeout time.Duration
}

// Reboot runs the command and fails if it does not exit 0 within the
// timeout.
func (c CommandRebooter) Reboot(ctx context.Context) error {
	_, err := Command{Argv: c.Argv, Timeout: cmp.Or(c.Timeout, time.Minute)}.Run(ctx)
	if err != nil {
		return fmt.Errorf("reboot %w", err)
	}
	return nil
}
