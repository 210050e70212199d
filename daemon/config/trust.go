package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Trust says whose configuration the loader accepts. The configuration
// names commands that run as root (sentinel.command, reboot.command,
// health.command), so a daemon running as root must not read a file or a
// directory of drop-ins that another user could have written: that user
// would run code as root.
type Trust struct {
	// Enforce refuses any file or directory not owned by Owner, or
	// writable by its group or by others.
	Enforce bool
	// Owner is the user ID that must own them: 0, root. (Tests that do not
	// run as root use their own.)
	Owner uint32
}

// TrustFor is the rule for a process whose effective user ID is euid
// (os.Geteuid()): enforced for root, who runs the commands; anyone else
// runs them with no more rights than they already have.
func TrustFor(euid int) Trust { return Trust{Enforce: euid == 0} }

// What is checked, with Enforce: the main file, the directory that holds
// it, config.d and each drop-in, each on the opened descriptor (fstat), so
// that what is checked is what is read, through symlinks. A root-owned
// directory with the sticky bit (/tmp) may be writable by others: they
// cannot rename or delete root's files in it, and a config.d they create
// there is theirs, so it is refused. Directories above the one holding the
// main file (/etc) are the system's.

// errNotRegular is a configuration path that is not a regular file (a
// FIFO would block the loader, a device would never end).
var errNotRegular = errors.New("not a regular file")

// readFile reads a configuration file after checking it.
func (t Trust) readFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if err := t.check(path, fi, false); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// dropIns lists the *.toml files of dir in lexical order, after checking
// dir. A missing dir (or a file in its place) means no drop-ins.
func (t Trust) dropIns(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, nil
	}
	if err := t.check(dir, fi, false); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if ok, _ := filepath.Match("*.toml", n); ok {
			out = append(out, filepath.Join(dir, n))
		}
	}
	slices.Sort(out)
	return out, nil
}

// checkDir checks the directory that holds the main file; one that cannot
// be opened is left to the error about the file.
func (t Trust) checkDir(dir string) error {
	if !t.Enforce {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		return nil
	}
	return t.check(dir, fi, true)
}

// check applies the rule to fi, the opened path. stickyOK allows a
// root-owned sticky directory that others may write (/tmp).
func (t Trust) check(path string, fi fs.FileInfo, stickyOK bool) error {
	if !t.Enforce {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("refused: cannot tell who owns it")
	}
	var why, fix []string
	target := symlinkTarget(path)
	name := path
	if target != "" {
		name = target
	}
	if st.Uid != t.Owner {
		why = append(why, fmt.Sprintf("owned by uid %d, not %s", st.Uid, t.ownerName()))
		fix = append(fix, fmt.Sprintf("chown %s %s", t.ownerName(), name))
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 && !(stickyOK && fi.Mode()&fs.ModeSticky != 0 && st.Uid == t.Owner) {
		who := map[fs.FileMode]string{0o020: "its group", 0o002: "others", 0o022: "its group and others"}[perm&0o022]
		why = append(why, fmt.Sprintf("writable by %s (mode %04o)", who, perm))
		fix = append(fix, "chmod go-w "+name)
	}
	if len(why) == 0 {
		return nil
	}
	what := "it is"
	if target != "" {
		what = "it is a symlink to " + target + ", which is"
	}
	return fmt.Errorf("refused: %s %s; running as root, kured-host reads only configuration that %s alone can write "+
		"(it names commands run as root): %s", what, strings.Join(why, " and "), t.ownerName(), strings.Join(fix, " && "))
}

func (t Trust) ownerName() string {
	if t.Owner == 0 {
		return "root"
	}
	return fmt.Sprintf("uid %d", t.Owner)
}

// symlinkTarget is where path leads if it is a symlink, for the message;
// "" if it is not one.
func symlinkTarget(path string) string {
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return ""
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "(unresolvable)"
	}
	return target
}
