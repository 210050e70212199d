package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/doctor"
	"github.com/kured-host/kured-host/daemon/host"
	"github.com/kured-host/kured-host/daemon/version"
)

const checkAbout = `Validates the configuration file and the drop-ins in config.d next to it,
reporting every problem with its file, key and line; then checks, without
starting the daemon, everything it needs on this host and in the cluster,
one line each ("ok", "warn" or "fail"): the kubelet kubeconfig and how it
was found, the node's identity, every permission the daemon uses, the
clock against the API server's, the reboot sentinel, the boot ID,
Prometheus (if it blocks reboots), logind on the system bus, the metrics
address (a warning if it listens on every interface).

--config-only prints the effective configuration instead, with where each
value came from (URLs redacted), and checks nothing else.

Run it as root, as the service runs: the kubelet's kubeconfig is readable
by root only. As root, a configuration file, config.d or a drop-in that
another user than root could write is refused, as the daemon refuses it.

Exit status: 0 all ok (or warnings), 1 a check failed, 2 invalid configuration.`

// checkFailed is a check that found problems: exit status 1.
type checkFailed struct{ failed, total int }

func (e *checkFailed) Error() string {
	if e.failed == 1 {
		return fmt.Sprintf("1 of %d checks failed", e.total)
	}
	return fmt.Sprintf("%d of %d checks failed", e.failed, e.total)
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("check", "[--config FILE] [--host-root DIR] [--kubeconfig FILE] [--system-bus ADDRESS] [--quiet] [--config-only]", checkAbout)
	path := f.String("config", config.DefaultPath, "configuration `file`; drop-ins are read from config.d next to it")
	root := f.String("host-root", "/", "`directory` under which the host's files are (sentinel, boot ID, kubelet kubeconfig), as for run")
	kubeconfig := f.String("kubeconfig", "", "use this kubeconfig `file` (not under --host-root) instead of finding the kubelet's")
	bus := f.String("system-bus", "", "D-Bus `address` to find logind on (default: $DBUS_SYSTEM_BUS_ADDRESS, else the system bus)")
	quiet := f.Bool("quiet", false, "print only warnings and failures (with --config-only: nothing when valid)")
	configOnly := f.Bool("config-only", false, "validate the configuration and print the effective result; check nothing else")
	if done, err := f.parse(args, stdout); done {
		return err
	}
	l, err := config.Load(*path, configTrust())
	if err != nil {
		return err
	}
	if *configOnly {
		return printConfig(l, *quiet, stdout, stderr)
	}
	var findings []doctor.Finding
	show := func(fd doctor.Finding) {
		findings = append(findings, fd)
		if !*quiet || fd.Level != doctor.OK {
			_ = doctor.Render(stdout, fd)
		}
	}
	show(doctor.Finding{Level: doctor.OK, Check: "config", Message: "valid: " + strings.Join(l.Files, ", ")})
	for _, w := range l.Config.Warnings() {
		show(doctor.Finding{Level: doctor.Warn, Check: "config", Message: w})
	}
	doctor.Run(ctx, doctor.Options{
		Config: l.Config, Root: host.Root(*root), Kubeconfig: *kubeconfig, BusAddress: *bus,
		UserAgent: "kured-host/" + version.Version + " (check)", Timeout: 10 * time.Second, UID: os.Geteuid(),
		Reload: func(cluster string) error {
			_, err := config.LoadWithCluster(*path, configTrust(), cluster)
			return err
		},
	}, show)
	if ctx.Err() != nil {
		return errors.New("check interrupted")
	}
	return checkStatus(findings)
}

// checkStatus is nil unless a finding failed.
func checkStatus(findings []doctor.Finding) error {
	if n := doctor.Count(findings)[doctor.Fail]; n > 0 {
		return &checkFailed{failed: n, total: len(findings)}
	}
	return nil
}

// printConfig is check --config-only: the effective configuration.
func printConfig(l *config.Loaded, quiet bool, stdout, stderr io.Writer) error {
	if quiet {
		for _, w := range l.Config.Warnings() {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		return nil
	}
	if err := l.Render(stdout); err != nil {
		return err
	}
	for _, w := range l.Config.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(stderr, "configuration OK (%s)\n", strings.Join(l.Files, ", "))
	return nil
}
