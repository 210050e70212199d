package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/kured-host/kured-host/daemon/config"
)

// BuildKuredHost builds the product's binary into dir, in the product's own
// module (as the Makefile does), with the given extra build flags, and
// returns its path. It finds the module from the working directory upwards.
func BuildKuredHost(dir string, flags ...string) (string, error) {
	root, err := productRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kured-host")
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, "./cmd/kured-host")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kured-host: %v\n%s", err, out)
	}
	return bin, nil
}

func productRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/kured-host/kured-host\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no github.com/kured-host/kured-host module above the working directory")
		}
		dir = parent
	}
}

// KuredHost is the real kured-host binary run as a service of a SimHost:
// started at every boot, killed by a reboot, restarted after a failure
// (as systemd would), with its own configuration file and --host-root.
type KuredHost struct {
	Host   *SimHost
	Config string // path of its config.toml

	mu  sync.Mutex
	log bytes.Buffer
	env []string
}

// RunKuredHost writes c for h and runs bin on h. env is added to the
// process's environment (DBUS_SYSTEM_BUS_ADDRESS, NOTIFY_SOCKET...).
func (h *SimHost) RunKuredHost(bin string, c config.Config, env ...string) (*KuredHost, error) {
	data, err := config.Marshal(c)
	if err != nil {
		return nil, err
	}
	return h.RunKuredHostTOML(bin, data, env...)
}

// RunKuredHostTOML is RunKuredHost with the configuration file as given:
// for a file that leaves keys unset, as an operator's does.
func (h *SimHost) RunKuredHostTOML(bin string, data []byte, env ...string) (*KuredHost, error) {
	k := &KuredHost{Host: h, Config: filepath.Join(h.Root, "etc/kured-host/config.toml"), env: env}
	if err := os.MkdirAll(filepath.Dir(k.Config), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(k.Config, data, 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "check", "--config-only", "--quiet", "--config", k.Config).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("configuration of %s: %v\n%s", h.Name, err, out)
	}
	h.AddProcess("kured-host", func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", k.Config, "--host-root", h.Root)
		k.mu.Lock()
		cmd.Env = append(os.Environ(), k.env...)
		k.mu.Unlock()
		cmd.Stdout, cmd.Stderr = k, k
		return cmd
	})
	return k, nil
}

// SetEnv replaces the extra environment for the next start.
func (k *KuredHost) SetEnv(env ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.env = env
}

// Write collects the process's output.
func (k *KuredHost) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.log.Write(p)
}

// Logs is everything the process wrote, over all its runs.
func (k *KuredHost) Logs() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.log.String()
}
