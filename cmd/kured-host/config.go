package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/kured-host/kured-host/daemon/config/fromkured"
	"github.com/kured-host/kured-host/daemon/printable"
)

// stdin is what `config from-kured` reads kured's DaemonSet from; tests
// replace it.
var stdin io.Reader = os.Stdin

const configAbout = `Tools for the configuration.

  kured-host config from-kured   write a drop-in from kured's arguments

Run "kured-host config from-kured --help" for its flags.`

const fromKuredAbout = `Reads kured's arguments and writes the kured-host drop-in that does the
same, as TOML for /etc/kured-host/config.d/, with a comment for each flag
that has no counterpart or changes meaning:

  kubectl -n kube-system get ds kured -o yaml | kured-host config from-kured
  kured-host config from-kured -- --period=1h --reboot-days=mon,tue

The DaemonSet may be YAML or JSON, a List, or helm template's output:
kured is the container named kured, or the only one; its command and
arguments are read as kured reads them, then its KURED_ variables, and
its paths are mapped to the host's through its hostPath volumes. Flags
after -- are read the same way, their paths taken as the host's.

A value that kured-host's default already has is a comment only, so the
drop-in sets no more than it must. What kured refuses, or what does not
load (a label a node may not set on itself), is a comment saying why, and
a warning here. The drop-in is checked as "kured-host check --config-only"
checks it before it is written.

Notify and Prometheus URLs may carry credentials: install the drop-in
root-owned with mode 0600 (-o writes it so).

Exit status: 0 written, 1 the output could not be written, 2 bad usage or
input that is not kured's DaemonSet.`

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "from-kured" {
		return runFromKured(ctx, args[1:], stdout, stderr)
	}
	f := newFlags("config", "from-kured [-f FILE] [-o FILE [--force]] [-- KURED-FLAGS...]", configAbout)
	if done, err := f.parse(args, stdout); done {
		return err
	}
	return &usageError{"config: name a subcommand: from-kured (see kured-host config --help)"}
}

func runFromKured(_ context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("config from-kured", "[-f FILE] [-o FILE [--force]] [-- KURED-FLAGS...]", fromKuredAbout)
	in := f.String("f", "-", "kured's DaemonSet `file` (YAML or JSON); - reads standard input")
	out := f.String("o", "", "write the drop-in to this `file`, mode 0600, instead of standard output")
	force := f.Bool("force", false, "with -o, replace the file if it exists")
	own, kuredArgs, dashed := splitAtDashes(args)
	if done, err := f.parse(own, stdout); done {
		return err
	}
	if *force && *out == "" {
		return &usageError{"config from-kured: --force goes with -o FILE"}
	}
	src, err := kuredSource(f, *in, kuredArgs, dashed)
	if err != nil {
		return err
	}
	res, err := fromkured.Convert(src)
	if errors.Is(err, fromkured.ErrUnprintable) {
		return &usageError{"config from-kured: " + err.Error()}
	}
	if err != nil {
		return fmt.Errorf("config from-kured: %w", err)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", printable.String(w))
	}
	if *out == "" {
		if _, err := stdout.Write(res.DropIn); err != nil {
			return err
		}
		if res.Secrets {
			fmt.Fprintf(stderr, "note: the drop-in holds notify or Prometheus URLs, which may carry credentials: "+
				"install it root-owned with mode 0600, as docs/configuration.md says of config.d/50-notify.toml "+
				"(install -m 0600 /dev/null FILE before redirecting into it, or use -o FILE)\n")
		}
		return nil
	}
	if err := writeDropIn(*out, res.DropIn, *force); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (mode 0600): install it in /etc/kured-host/config.d/, root-owned, then run kured-host check --config-only\n", *out)
	return nil
}

// splitAtDashes splits args at the first "--": this command's flags
// before it, kured's after it.
func splitAtDashes(args []string) (own, kured []string, dashed bool) {
	i := slices.Index(args, "--")
	if i < 0 {
		return args, nil, false
	}
	return args[:i], args[i+1:], true
}

// kuredSource reads kured's command line: the flags after --, or the
// DaemonSet from -f (standard input by default).
func kuredSource(f *flags, in string, kuredArgs []string, dashed bool) (fromkured.Source, error) {
	fileSet := false
	f.Visit(func(fl *flag.Flag) { fileSet = fileSet || fl.Name == "f" })
	switch {
	case dashed && fileSet:
		return fromkured.Source{}, &usageError{"config from-kured: give kured's flags after -- or its DaemonSet with -f, not both"}
	case dashed:
		return fromkured.FromArgs(kuredArgs), nil
	}
	var r io.Reader = stdin
	if in != "-" {
		file, err := os.Open(in)
		if err != nil {
			return fromkured.Source{}, fmt.Errorf("config from-kured: %w", err)
		}
		defer file.Close()
		r = file
	} else if file, ok := stdin.(*os.File); ok && isTerminal(file) {
		return fromkured.Source{}, &usageError{"config from-kured: standard input is a terminal: pipe kured's DaemonSet in " +
			"(kubectl -n kube-system get ds kured -o yaml | kured-host config from-kured), or give kured's flags after --"}
	}
	src, err := fromkured.ReadDaemonSet(r)
	if errors.Is(err, fromkured.ErrInput) || errors.Is(err, fromkured.ErrUnprintable) {
		return src, &usageError{"config from-kured: " + err.Error()}
	}
	return src, err
}

// writeDropIn writes data to path with mode 0600, since it may hold
// credentials. An existing file is kept unless force; then it is
// replaced by a new file (rename), so that no moment shows the
// credentials with the old file's mode.
func writeDropIn(path string, data []byte, force bool) error {
	if !force {
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return &usageError{fmt.Sprintf("config from-kured: %s exists: --force replaces it", path)}
		}
		if err != nil {
			return fmt.Errorf("config from-kured: %w", err)
		}
		if err := closeAfter(file, data); err != nil {
			os.Remove(path)
			return err
		}
		return nil
	}
	file, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("config from-kured: %w", err)
	}
	if err := closeAfter(file, data); err != nil {
		os.Remove(file.Name())
		return err
	}
	if err := os.Rename(file.Name(), path); err != nil {
		os.Remove(file.Name())
		return fmt.Errorf("config from-kured: %w", err)
	}
	return nil
}

// closeAfter writes data to file and closes it, with mode 0600 whatever
// the umask left.
func closeAfter(file *os.File, data []byte) error {
	err := file.Chmod(0o600)
	if err == nil {
		_, err = file.Write(data)
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("config from-kured: write %s: %w", file.Name(), err)
	}
	return nil
}
