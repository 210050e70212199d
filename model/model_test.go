// Package model runs the spin model of the slot protocol (claims.pml): the
// protocol must pass, and each deliberately broken variant must fail, so
// that a pass means something.
package model

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

type run struct {
	name     string
	defines  []string
	liveness bool
	// fails is what spin must report ("" for no error at all).
	fails string
}

var runs = []run{
	{"safety with crashes", []string{"-DMAXCRASH=2", "-DMAXLOST=0", "-DMAXADMIN=0"}, false, ""},
	{"safety with lost replies and an admin", []string{"-DMAXCRASH=0", "-DMAXLOST=1", "-DMAXADMIN=1"}, false, ""},
	{"safety with an admin's edit of a label alone", []string{"-DMAXCRASH=0", "-DMAXLOST=0", "-DMAXADMIN=0", "-DMAXEDIT=1"}, false, ""},
	{"safety where the global limit binds on its own, with crashes", []string{"-DCONFIG2", "-DMAXCRASH=2", "-DMAXLOST=0", "-DMAXADMIN=0"}, false, ""},
	{"liveness", []string{"-DLIVENESS"}, true, ""},
	{"liveness where the global limit binds on its own", []string{"-DLIVENESS", "-DCONFIG2"}, true, ""},

	{"broken: verify from a snapshot taken before the announce", []string{"-DSTALE_VERIFY", "-DMAXCRASH=0"}, false, "assertion violated"},
	{"broken: ignore entering claims", []string{"-DIGNORE_ENTERING", "-DMAXCRASH=0"}, false, "assertion violated"},
	{"broken: drop the strictest-limit rule", []string{"-DNO_STRICTEST", "-DMAXCRASH=0"}, false, "assertion violated"},
	{"broken: unconditional writes", []string{"-DUNCONDITIONAL", "-DMAXCRASH=0"}, false, "assertion violated"},
	{"broken: verify trusts the claim it remembers (an edited label unseen)", []string{"-DSTALE_OWN", "-DMAXCRASH=0", "-DMAXLOST=0", "-DMAXADMIN=0", "-DMAXEDIT=1"}, false, "assertion violated"},
	{"broken: drop the global limit where it binds on its own", []string{"-DCONFIG2", "-DNO_GLOBAL", "-DMAXCRASH=0"}, false, "assertion violated"},
	{"broken: loose eligibility (livelock)", []string{"-DLIVENESS", "-DLOOSE"}, true, "acceptance cycle"},
}

// full is every fault at once; it takes minutes and 3 GB, so it runs with
// KURED_HOST_MODEL_FULL=1 (make model-full).
var full = run{"safety with crashes, lost replies and an admin", []string{"-DMAXCRASH=2", "-DMAXLOST=1", "-DMAXADMIN=1"}, false, ""}

var (
	errorsRe = regexp.MustCompile(`errors: (\d+)`)
	statesRe = regexp.MustCompile(`([0-9.e+]+) states, stored`)
)

func TestModel(t *testing.T) {
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed for the model check: run `make tools` (Debian package %s)", tool, tool)
		}
	}
	src, err := filepath.Abs("claims.pml")
	if err != nil {
		t.Fatal(err)
	}
	all := runs
	if os.Getenv("KURED_HOST_MODEL_FULL") != "" {
		all = append(all, full)
	}
	for _, r := range all {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			out := check(t, src, r)
			m := errorsRe.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no result from spin:\n%s", out)
			}
			errs, _ := strconv.Atoi(m[1])
			states := ""
			if s := statesRe.FindStringSubmatch(out); s != nil {
				states = s[1]
			}
			t.Logf("%s: %s states, %d error(s)", strings.Join(r.defines, " "), states, errs)
			switch {
			case r.fails == "" && errs != 0:
				t.Errorf("spin found an error in the protocol:\n%s", out)
			case r.fails != "" && (errs == 0 || !strings.Contains(out, r.fails)):
				t.Errorf("spin did not find %q in a broken variant:\n%s", r.fails, out)
			case r.fails == "" && strings.Contains(out, "max search depth too small"):
				t.Errorf("the search was cut short (raise -m):\n%s", out)
			}
		})
	}
}

// check generates, compiles and runs the verifier for one run.
func check(t *testing.T, src string, r run) string {
	dir := t.TempDir()
	sh := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil && name != "./pan" {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sh("spin", append(append([]string{"-a"}, r.defines...), src)...)
	cflags := []string{"-O2", "-w", "-DCOLLAPSE", "-o", "pan", "pan.c"}
	args := []string{"-m3000000"}
	if r.liveness {
		cflags = append([]string{"-DNFAIR=3"}, cflags...)
		args = append(args, "-a", "-f")
	} else {
		cflags = append([]string{"-DSAFETY"}, cflags...)
	}
	sh("gcc", cflags...)
	return sh("./pan", args...)
}
