package host

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// These run real short shell commands. The bounds on elapsed time are
// generous: they tell "did not wait for the process left behind" (10 s)
// from "returned", nothing finer.

func TestCommandRun(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		timeout time.Duration
		code    int
		out     string // the output, exactly
		errIs   error  // nil: success
		errSays string
	}{
		{"success", []string{"sh", "-c", "echo hello; echo world >&2"}, 0, 0, "hello | world", nil, ""},
		{"exit status", []string{"sh", "-c", "echo not healthy; exit 3"}, 0, 3, "not healthy", &exec.ExitError{}, `command "sh -c echo not healthy; exit 3": exit status 3: not healthy`},
		{"timeout", []string{"sh", "-c", "echo started; sleep 10"}, 200 * time.Millisecond, -1, "started", ErrTimeout, "did not finish within 200ms (killed): timed out: started"},
		{"missing program", []string{"/nonexistent/health"}, 0, -1, "", nil, `run command "/nonexistent/health"`},
		{"terminal escapes and control characters are escaped", []string{"sh", "-c", `printf '\033[2J\033]0;owned\007 line\r\nnext\tcol\n'`}, 0, 0,
			`\x1b[2J\x1b]0;owned\a line | next col`, nil, ""},
		{"bytes that are not UTF-8", []string{"sh", "-c", `printf 'a\377b \342\200\256evil'`}, 0, 0, `a\xffb \u202eevil`, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Command{Argv: tt.argv, Timeout: tt.timeout, WaitDelay: 100 * time.Millisecond}.Run(context.Background())
			if res.ExitCode != tt.code || res.Output != tt.out {
				t.Errorf("exit %d, output %q; want %d, %q", res.ExitCode, res.Output, tt.code, tt.out)
			}
			switch {
			case tt.errSays == "" && err != nil:
				t.Fatalf("err %v", err)
			case tt.errSays != "" && (err == nil || !strings.Contains(err.Error(), tt.errSays)):
				t.Fatalf("err %v, want it to say %q", err, tt.errSays)
			}
			var exit *exec.ExitError
			switch want := tt.errIs.(type) {
			case *exec.ExitError:
				if !errors.As(err, &exit) {
					t.Errorf("err %v is not an *exec.ExitError", err)
				}
			case nil:
			default:
				if !errors.Is(err, want) {
					t.Errorf("err %v is not %v", err, want)
				}
			}
		})
	}
}

// TestCommandLeavesAGrandchild: a process the command left behind holding
// its output open is not waited for, on success, on failure, and on a
// timeout (where the whole process group is killed).
func TestCommandLeavesAGrandchild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		timeout time.Duration
		ok      bool
	}{
		{"exits 0", "sleep 10 & echo hi", 0, true},
		{"exits 1", "sleep 10 & echo hi; exit 1", 0, false},
		{"times out", "sleep 10 & echo hi; sleep 10", 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			res, err := Command{Argv: []string{"sh", "-c", tc.script}, Timeout: tc.timeout, WaitDelay: 200 * time.Millisecond}.Run(context.Background())
			if took := time.Since(began); took > 5*time.Second {
				t.Errorf("returned after %s: it waited for the process left behind", took)
			}
			if (err == nil) != tc.ok || res.Output != "hi" {
				t.Errorf("err %v, output %q; want ok %v and \"hi\"", err, res.Output, tc.ok)
			}
		})
	}
}

func TestCommandContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err := Command{Argv: []string{"sleep", "10"}, Timeout: time.Hour}.Run(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("err %v, want context.Canceled", err)
	}
}

// TestCommandOutputIsBounded: a command that writes megabytes leaves
// only the end of its output, marked as truncated.
func TestCommandOutputIsBounded(t *testing.T) {
	res, err := Command{Argv: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo THE END"}}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Output, "(truncated) …") || !strings.HasSuffix(res.Output, "x | THE END") || len(res.Output) > MaxOutput+32 {
		t.Errorf("output of %d bytes: %.40q … %q", len(res.Output), res.Output, res.Output[max(len(res.Output)-20, 0):])
	}
}

func TestTailCutsInsideACharacter(t *testing.T) {
	tl := &tail{max: 4}
	tl.Write([]byte("ab東京")) // 東 and 京 are three bytes each: the last 4 bytes start inside 東
	if got := tl.String(); got != "(truncated) …京" {
		t.Errorf("got %q", got)
	}
}

func TestCommandRebooter(t *testing.T) {
	err := CommandRebooter{Argv: []string{"sh", "-c", "echo refused >&2; exit 1"}}.Reboot(context.Background())
	if err == nil || err.Error() != `reboot command "sh -c echo refused >&2; exit 1": exit status 1: refused` {
		t.Errorf("err %v", err)
	}
	began := time.Now()
	err = CommandRebooter{Argv: []string{"sleep", "10"}, Timeout: 200 * time.Millisecond}.Reboot(context.Background())
	if !errors.Is(err, ErrTimeout) || time.Since(began) > 5*time.Second {
		t.Errorf("err %v after %s, want a timeout (reboot.timeout)", err, time.Since(began))
	}
}
