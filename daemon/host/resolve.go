package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links one lookup follows, as the kernel
// does (ELOOP after 40).
const maxLinks = 40

// Resolve finds the host's path p inside the root as the host itself would
// see it: symbolic links are followed, an absolute link target is taken
// from the root, and no link leads out of it (".." stops at the root).
// Under "/" this is the kernel's own lookup; under another root, a link
// such as the kubelet's kubelet-client-current.pem -> /var/lib/kubelet/…
// would otherwise be followed into the file system kured-host runs in.
//
// visit, unless nil, is called with the root, each directory walked
// through and, last, the file itself, after links are followed; an error
// from it ends the lookup. Every directory that holds a link on the way
// is among them, so a caller that checks who may write each one checks
// everything that decides where p leads.
func (r Root) Resolve(p string, visit func(path string, fi fs.FileInfo) error) (string, error) {
	l := &lookup{root: r, p: p, top: string(r), visit: visit, todo: split(p)}
	if l.top == "" {
		l.top = "/"
	}
	if err := l.visitTop(); err != nil {
		return "", err
	}
	for len(l.todo) > 0 {
		if err := l.step(); err != nil {
			return "", err
		}
	}
	return l.path(), nil
}

// lookup is one Resolve under way.
type lookup struct {
	root  Root
	p     string // as given, for errors
	top   string // the root's directory
	visit func(path string, fi fs.FileInfo) error
	todo  []string // the components left to walk, links' targets spliced in
	done  []string // the resolved components below the root
	links int
}

// visitTop shows visit the root first: it decides where every absolute link leads.
func (l *lookup) visitTop() error {
	if l.visit == nil {
		return nil
	}
	fi, err := os.Stat(l.top)
	if err != nil {
		return err
	}
	return l.visit(l.top, fi)
}

// step walks one component: ".." stops at the root, a link is replaced by its target.
func (l *lookup) step() error {
	c := l.todo[0]
	l.todo = l.todo[1:]
	if c == ".." {
		if len(l.done) > 0 {
			l.done = l.done[:len(l.done)-1]
		}
		return nil
	}
	full := l.path(c)
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return l.follow(full)
	}
	if len(l.todo) > 0 && !fi.IsDir() {
		return &fs.PathError{Op: "resolve", Path: full, Err: syscall.ENOTDIR}
	}
	if l.visit != nil {
		if err := l.visit(full, fi); err != nil {
			return err
		}
	}
	l.done = append(l.done, c)
	return nil
}

// follow splices the link's target in; an absolute one starts again from the root.
func (l *lookup) follow(full string) error {
	if l.links++; l.links > maxLinks {
		return &fs.PathError{Op: "resolve", Path: l.root.Path(l.p), Err: syscall.ELOOP}
	}
	target, err := os.Readlink(full)
	if err != nil {
		return err
	}
	if filepath.IsAbs(target) {
		l.done = nil
	}
	l.todo = append(split(target), l.todo...)
	return nil
}

// path is the resolved components, and then more, inside the root.
func (l *lookup) path(more ...string) string {
	return filepath.Join(l.top, filepath.Join(append(l.done, more...)...))
}

func split(p string) []string {
	var out []string
	for _, c := range strings.Split(filepath.ToSlash(p), "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// ErrUntrusted marks a file that someone other than root (or the user
// kured-host runs as) could have written.
var ErrUntrusted = errors.New("not safe to trust")

// OnlyWritableBy returns a visit function for Resolve that accepts a file
// or directory only if it is owned by root or uid and neither its group
// nor others may write to it: what it says could otherwise have been put
// there by another local user. A sticky world-writable directory such as
// /tmp is refused too: its files' names can be taken by anyone.
func OnlyWritableBy(uid int) func(string, fs.FileInfo) error {
	return func(path string, fi fs.FileInfo) error {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%w: %s: cannot tell its owner", ErrUntrusted, path)
		}
		what := "file"
		if fi.IsDir() {
			what = "directory"
		}
		if owner := int(st.Uid); owner != 0 && owner != uid {
			return fmt.Errorf("%w: %s: the %s belongs to uid %d, not root", ErrUntrusted, path, what, owner)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%w: %s: the %s may be written by its group or others (mode %04o)", ErrUntrusted, path, what, st.Mode&0o7777)
		}
		return nil
	}
}
