package packaging

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// The package tests inspect what `make package` built, with the real
// tools: dpkg-deb, rpm, lintian and systemd-analyze. `make test-packages`
// builds the packages and runs them with KURED_HOST_DIST set.

type target struct {
	goarch, rpmArch string
	machine         elf.Machine
}

var targets = []target{
	{"amd64", "x86_64", elf.EM_X86_64},
	{"arm64", "aarch64", elf.EM_AARCH64},
}

// wantFile is a path a package must hold, with its mode as the tools print it.
type wantFile struct {
	path, mode string
}

var common = []wantFile{
	{"/usr/bin/kured-host", "-rwxr-xr-x"},
	{"/etc/kured-host/config.toml", "-rw-r-----"},
	{"/etc/kured-host/config.d", "drwxr-xr-x"},
	{"/usr/share/kured-host/rbac.yaml", "-rw-r--r--"},
	{"/usr/share/kured-host/config.toml.example", "-rw-r--r--"},
	{"/usr/share/doc/kured-host/README.md", "-rw-r--r--"},
	{"/usr/share/doc/kured-host/configuration.md", "-rw-r--r--"},
}

var debOnly = []wantFile{
	{"/lib/systemd/system/kured-host.service", "-rw-r--r--"},
	{"/usr/share/doc/kured-host/copyright", "-rw-r--r--"},
	{"/usr/share/doc/kured-host/changelog.Debian.gz", "-rw-r--r--"},
	{"/usr/share/lintian/overrides/kured-host", "-rw-r--r--"},
}

var rpmOnly = []wantFile{
	{"/usr/lib/systemd/system/kured-host.service", "-rw-r--r--"},
	{"/usr/share/licenses/kured-host/LICENSE", "-rw-r--r--"},
}

func TestPackages(t *testing.T) {
	dist := os.Getenv("KURED_HOST_DIST")
	if dist == "" {
		t.Skip("KURED_HOST_DIST is not set: run `make test-packages`, which builds the packages first")
	}
	version := os.Getenv("KURED_HOST_VERSION")
	if version == "" {
		t.Fatal("KURED_HOST_VERSION must be the version the packages were built with")
	}
	for _, tg := range targets {
		t.Run("deb/"+tg.goarch, func(t *testing.T) { testDeb(t, dist, version, tg) })
		t.Run("rpm/"+tg.goarch, func(t *testing.T) { testRPM(t, dist, version, tg) })
	}
}

// pkgVersion is the package version nfpm makes of a SemVer version: a
// pre-release sorts before its release with "~".
func pkgVersion(semver string) string {
	core, meta, hasMeta := strings.Cut(semver, "+")
	core = strings.Replace(core, "-", "~", 1)
	if hasMeta {
		return core + "+" + meta
	}
	return core
}

func onePackage(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	must(t, err)
	if len(m) != 1 {
		t.Fatalf("want exactly one package matching %s, found %v", pattern, m)
	}
	return m[0]
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func testDeb(t *testing.T, dist, version string, tg target) {
	deb := onePackage(t, filepath.Join(dist, fmt.Sprintf("kured-host_%s-1_%s.deb", pkgVersion(version), tg.goarch)))

	fields := output(t, "dpkg-deb", "--field", deb, "Package", "Version", "Architecture", "Depends")
	wantFields := fmt.Sprintf("Package: kured-host\nVersion: %s-1\nArchitecture: %s\n", pkgVersion(version), tg.goarch)
	if fields != wantFields {
		t.Errorf("control fields:\n%s\nwant (no dependencies: the binary is static):\n%s", fields, wantFields)
	}
	if got := output(t, "dpkg-deb", "--info", deb, "conffiles"); strings.TrimSpace(got) != "/etc/kured-host/config.toml" {
		t.Errorf("conffiles = %q, want only /etc/kured-host/config.toml", got)
	}

	// dpkg-deb --contents prints "mode owner/group size date time ./path".
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(output(t, "dpkg-deb", "--contents", deb)), "\n") {
		f := strings.Fields(line)
		// nfpm writes its generated changelog with numeric ids (0/0).
		owner := strings.Replace(f[1], "0/0", "root/root", 1)
		listed[strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "."), "/")] = f[0] + " " + owner
	}
	checkFiles(t, listed, append(append([]wantFile{}, common...), debOnly...), rpmOnly, "root/root")

	ctrl := t.TempDir()
	output(t, "dpkg-deb", "--control", deb, ctrl)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		sameFile(t, filepath.Join(ctrl, s), filepath.Join("deb", s))
	}

	root := t.TempDir()
	output(t, "dpkg-deb", "--extract", deb, root)
	checkBinary(t, root, version, tg)
	sameFile(t, filepath.Join(root, "usr/share/kured-host/rbac.yaml"), "rbac.yaml")
	sameFile(t, filepath.Join(root, "etc/kured-host/config.toml"), "../config.toml.example")
	sameFile(t, filepath.Join(root, "lib/systemd/system/kured-host.service"), "../systemd/kured-host.service")
	if tg.goarch == runtime.GOARCH {
		checkUnit(t, root)
	}
	checkLintian(t, deb)
}

func testRPM(t *testing.T, dist, version string, tg target) {
	rpm := onePackage(t, filepath.Join(dist, fmt.Sprintf("kured-host-%s-1.%s.rpm", pkgVersion(version), tg.rpmArch)))

	head := output(t, "rpm", "-qp", "--qf", "%{NAME}|%{VERSION}|%{RELEASE}|%{ARCH}|%{LICENSE}", rpm)
	if want := fmt.Sprintf("kured-host|%s|1|%s|Apache-2.0", pkgVersion(version), tg.rpmArch); head != want {
		t.Errorf("rpm header %q, want %q", head, want)
	}
	listed := map[string]string{}
	flags := map[string]string{}
	digests := map[string]string{}
	out := output(t, "rpm", "-qp", "--qf", `[%{FILENAMES}\t%{FILEMODES:perms}\t%{FILEUSERNAME}/%{FILEGROUPNAME}\t%{FILEFLAGS:fflags}\t%{FILEDIGESTS}\n]`, rpm)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		listed[f[0]] = f[1] + " " + f[2]
		flags[f[0]] = f[3]
		digests[f[0]] = f[4]
	}
	checkFiles(t, listed, append(append([]wantFile{}, common...), rpmOnly...), debOnly, "root/root")
	// %config(noreplace): rpm prints the flags c and n.
	if f := flags["/etc/kured-host/config.toml"]; !strings.Contains(f, "c") || !strings.Contains(f, "n") {
		t.Errorf("config.toml flags %q, want config and noreplace (c, n)", f)
	}
	if f := flags["/usr/share/licenses/kured-host/LICENSE"]; !strings.Contains(f, "l") {
		t.Errorf("LICENSE flags %q, want license (l)", f)
	}
	for _, req := range strings.Split(output(t, "rpm", "-qp", "--requires", rpm), "\n") {
		if strings.Contains(req, ".so") {
			t.Errorf("requires a shared library (the binary must be static): %s", req)
		}
	}
	for tag, file := range map[string]string{"POSTIN": "post", "PREUN": "preun", "POSTUN": "postun"} {
		got := output(t, "rpm", "-qp", "--qf", "%{"+tag+"}", rpm)
		want, err := os.ReadFile(filepath.Join("rpm", file))
		must(t, err)
		if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
			t.Errorf("%%%s scriptlet differs from packaging/rpm/%s:\n%s", strings.ToLower(tag), file, got)
		}
	}
	// The rpm carries the same binary as the deb of that architecture.
	bin, err := os.ReadFile(filepath.Join(filepath.Dir(rpm), "linux_"+tg.goarch, "kured-host"))
	must(t, err)
	sum := sha256.Sum256(bin)
	if got := digests["/usr/bin/kured-host"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("/usr/bin/kured-host digest %s, want the built binary's %x", got, sum)
	}
}

// checkFiles compares a package's listing (path -> "mode owner") with
// what it must and must not hold.
func checkFiles(t *testing.T, listed map[string]string, want, absent []wantFile, owner string) {
	t.Helper()
	for _, w := range want {
		got, ok := listed[w.path]
		if !ok {
			t.Errorf("missing %s", w.path)
			continue
		}
		if got != w.mode+" "+owner {
			t.Errorf("%s is %q, want %q", w.path, got, w.mode+" "+owner)
		}
	}
	for _, a := range absent {
		if _, ok := listed[a.path]; ok {
			t.Errorf("%s does not belong in this package", a.path)
		}
	}
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	must(t, err)
	w, err := os.ReadFile(want)
	must(t, err)
	if !bytes.Equal(g, w) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// checkBinary: right architecture, statically linked, and (where it can
// run) reports the package's version and accepts the shipped config.
func checkBinary(t *testing.T, root, version string, tg target) {
	t.Helper()
	bin := filepath.Join(root, "usr/bin/kured-host")
	f, err := elf.Open(bin)
	must(t, err)
	defer f.Close()
	if f.Machine != tg.machine {
		t.Errorf("binary is for %v, want %v", f.Machine, tg.machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary is dynamically linked (%v program header)", p.Type)
		}
	}
	if tg.goarch != runtime.GOARCH {
		return
	}
	if out := output(t, bin, "version"); !strings.HasPrefix(out, "kured-host "+version+"\n") {
		t.Errorf("kured-host version printed %q, want version %s", out, version)
	}
	output(t, bin, "check", "--config-only", "--quiet", "--config", filepath.Join(root, "etc/kured-host/config.toml"))
}

var exposure = regexp.MustCompile(`Overall exposure level for kured-host.service: ([0-9.]+)`)

// checkUnit runs systemd-analyze on the packaged unit, pointed at the
// packaged binary: no warning at all, and the exposure score stays low.
func checkUnit(t *testing.T, root string) {
	t.Helper()
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/kured-host.service"))
	must(t, err)
	bin := filepath.Join(root, "usr/bin/kured-host")
	dir := t.TempDir()
	path := filepath.Join(dir, "kured-host.service")
	// Each command line (ExecStart=, ExecStopPost=) runs the packaged binary.
	must(t, os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/kured-host "), []byte(bin+" ")), 0o644))

	cmd := exec.Command("systemd-analyze", "verify", path)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", path).CombinedOutput()
	m := exposure.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	must(t, err)
	t.Logf("systemd-analyze security exposure: %.1f", score)
	if score > 1.8 {
		t.Errorf("exposure %.1f: the unit lost hardening (was 1.7, and must stay at or below 1.8)\n%s", score, out)
	}
}

// checkLintian wants no finding at all: the accepted ones are overridden,
// with reasons, in packaging/deb/lintian-overrides.
func checkLintian(t *testing.T, deb string) {
	t.Helper()
	out, _ := exec.Command("lintian", "--pedantic", deb).CombinedOutput()
	var findings []string
	for _, line := range strings.Split(string(out), "\n") {
		if line != "" && !strings.Contains(line, "running with root privileges is not recommended") {
			findings = append(findings, line)
		}
	}
	if len(findings) > 0 {
		t.Errorf("lintian:\n%s", strings.Join(findings, "\n"))
	}
}
