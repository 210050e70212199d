// Command kured-host-vm-guest runs inside the VM of the VM test
// (test/cluster/vmtest), from the read-only 9p share, as two systemd
// services of the image (test/vm/guest):
//
//	kubelet --kubeconfig /etc/kubernetes/kubelet.conf  (a link named kubelet)
//	kured-host-vm-guest agent --listen :7050
//	kured-host-vm-guest provision  (kubelet.service's ExecStartPre)
//
// and as the entrypoint of the two container images the test imports for
// the real kubelet (pause, workload).
//
// kubelet is the stand-in for the node's kubelet, with the node's own
// credentials: it registers the Node (named after the host, as the kubelet
// does), reports it Ready with the boot ID, renews its lease, moves the
// pods bound to it to Running, finishes the ones being deleted, and
// reports NotReady when stopped (as graceful node shutdown does).
//
// agent runs the test driver's shell commands as root and answers with
// their output and exit status, over HTTP on the VM's network (a tap
// device in the test's own network namespace).
//
// It is built static (CGO_ENABLED=0) by the test.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

const bootIDPath = "/proc/sys/kernel/random/boot_id"

func main() {
	// journald stamps each line itself.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	args := os.Args
	// Run as kubelet, the name kured-host looks for in kubelet.service,
	// as it would find a real kubelet.
	if filepath.Base(args[0]) == "kubelet" {
		args = append([]string{args[0], "kubelet"}, args[1:]...)
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kured-host-vm-guest kubelet|agent|provision|pause|workload [flags]")
		os.Exit(2)
	}
	var err error
	switch args[1] {
	case "kubelet":
		err = runKubelet(ctx, log.With("component", "kubelet"), args[2:])
	case "agent":
		err = runAgent(ctx, log.With("component", "agent"), args[2:])
	case "provision":
		err = runProvision(ctx, log.With("component", "provision"))
	case "pause", "workload":
		// The entrypoints of the test's container images: the pod
		// sandbox's process, and a workload that says when it is
		// stopped. Both end on SIGTERM, as a well-behaved container does.
		say(log, args[1]+" started")
		<-ctx.Done()
		say(log, args[1]+" stopping: SIGTERM")
	default:
		fmt.Fprintf(os.Stderr, "kured-host-vm-guest: unknown command %q\n", args[1])
		os.Exit(2)
	}
	if err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// bootID is this boot's ID, as the kernel has it.
func bootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// workloadLog is where a container says what it does when the test mounts
// a host directory there: the node's disk keeps it after the kubelet has
// removed the container and its log.
const workloadLog = "/vmtest/workload.log"

// say logs msg, and appends it to workloadLog if its directory is there.
func say(log *slog.Logger, msg string) {
	log.Info(msg, "pid", os.Getpid())
	if _, err := os.Stat(filepath.Dir(workloadLog)); err != nil {
		return
	}
	f, err := os.OpenFile(workloadLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Warn("cannot keep the line on the host", "err", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, msg)
}
