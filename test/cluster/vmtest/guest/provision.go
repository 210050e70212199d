package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Where provision finds the real kubelet's files in the test's share
// (test/cluster/vmtest: startVM with realKubelet), and where kubeadm would
// have put them on a node.
const (
	shareKubelet   = "/mnt/share/kubelet"
	kubeletLink    = "/usr/local/bin/kubelet"
	kubeletConfig  = "/var/lib/kubelet/config.yaml"
	kubeadmFlags   = "/var/lib/kubelet/kubeadm-flags.env"
	standInProgram = "/mnt/share/bin/kured-host-vm-guest"
)

// runProvision prepares kubelet.service's start (its ExecStartPre): with a
// real kubelet in the share, what kubeadm leaves on a node (the
// KubeletConfiguration, the flags file the unit reads, containerd running
// with the test's images imported, since no registry is reachable);
// without one, the stand-in. Either way /usr/local/bin/kubelet is the
// program kubelet.service runs.
func runProvision(ctx context.Context, log *slog.Logger) error {
	real := filepath.Join(shareKubelet, "kubelet")
	if _, err := os.Stat(real); errors.Is(err, fs.ErrNotExist) {
		if err := os.Remove(kubeadmFlags); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return link(standInProgram, kubeletLink)
	}
	for src, dst := range map[string]string{
		filepath.Join(shareKubelet, "config.yaml"):       kubeletConfig,
		filepath.Join(shareKubelet, "kubeadm-flags.env"): kubeadmFlags,
	} {
		if err := install(src, dst); err != nil {
			return err
		}
	}
	if err := command(ctx, "systemctl", "start", "containerd.service"); err != nil {
		return err
	}
	images, err := filepath.Glob(filepath.Join(shareKubelet, "images", "*.tar"))
	if err != nil {
		return err
	}
	for _, img := range images {
		// The CRI's images live in containerd's k8s.io namespace.
		if err := command(ctx, "ctr", "--namespace", "k8s.io", "images", "import", img); err != nil {
			return err
		}
		log.Info("image imported", "archive", filepath.Base(img))
	}
	if err := link(real, kubeletLink); err != nil {
		return err
	}
	log.Info("the real kubelet is set up", "config", kubeletConfig, "flags", kubeadmFlags)
	return nil
}

func link(target, name string) error {
	tmp := name + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func install(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func command(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
