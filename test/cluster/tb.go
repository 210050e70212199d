package cluster

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
)

// processTB is the ktesting.TB that StartTestServer needs, for a control
// plane that outlives any one test (started from TestMain and shared by a
// package's tests). Logs go to w; a fatal error panics, and Start turns the
// panic back into an error.
type processTB struct {
	w        io.Writer
	mu       sync.Mutex
	failed   bool
	cleanups []func()
	dir      string
}

type fatal struct{ msg string }

func (t *processTB) Attr(string, string)          {}
func (t *processTB) Chdir(string)                 { panic(fatal{"Chdir is not supported by the shared control plane"}) }
func (t *processTB) Error(args ...any)            { t.log(fmt.Sprint(args...)); t.Fail() }
func (t *processTB) Errorf(f string, args ...any) { t.log(fmt.Sprintf(f, args...)); t.Fail() }
func (t *processTB) Fatal(args ...any)            { t.die(fmt.Sprint(args...)) }
func (t *processTB) Fatalf(f string, args ...any) { t.die(fmt.Sprintf(f, args...)) }
func (t *processTB) FailNow()                     { t.die("FailNow") }
func (t *processTB) Helper()                      {}
func (t *processTB) Log(args ...any)              { t.log(fmt.Sprint(args...)) }
func (t *processTB) Logf(f string, args ...any)   { t.log(fmt.Sprintf(f, args...)) }
func (t *processTB) Name() string                 { return "cluster" }
func (t *processTB) Setenv(k, v string)           { _ = os.Setenv(k, v) }
func (t *processTB) Skip(...any)                  { panic(fatal{"Skip is not supported"}) }
func (t *processTB) Skipf(string, ...any)         { panic(fatal{"Skip is not supported"}) }
func (t *processTB) SkipNow()                     { panic(fatal{"Skip is not supported"}) }
func (t *processTB) Skipped() bool                { return false }

func (t *processTB) die(msg string) {
	t.log(msg)
	t.Fail()
	panic(fatal{msg})
}

func (t *processTB) Fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *processTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *processTB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *processTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "tmp")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (t *processTB) log(msg string) {
	if t.w == nil {
		return
	}
	_, file, line, _ := runtime.Caller(2)
	fmt.Fprintf(t.w, "%s:%d: %s\n", file, line, msg)
}

// cleanup runs the registered cleanups, last first.
func (t *processTB) cleanup() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
