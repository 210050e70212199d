package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kured-host/kured-host/daemon/config"
	"github.com/kured-host/kured-host/daemon/host"
)

// Watch tries to watch dir as the daemon does (inotify), and stops.
func Watch(dir string) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	return w.Add(dir)
}

// Sentinel checks what tells the daemon that a reboot is needed: the
// command is executable, or the file's directory exists and can be watched
// (watch is Watch but for tests). The file is under root; the command is
// run as it is, as the daemon does.
func Sentinel(c config.SentinelConfig, root host.Root, watch func(dir string) error) Finding {
	const check = "sentinel"
	if len(c.Command) > 0 {
		f := Executable(check, "sentinel.command", c.Command)
		if f.Level == OK {
			f.Message += fmt.Sprintf(", run every %s; exit codes %v mean a reboot is needed", c.Period, c.RebootExitCodes)
		}
		return f
	}
	path := root.Path(c.File)
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return finding(Fail, check, "sentinel.file %s: the directory %s does not exist, so the file never appears there; is the path right?", path, dir)
	case err != nil:
		return finding(Fail, check, "sentinel.file %s: %v", path, err)
	case !st.IsDir():
		return finding(Fail, check, "sentinel.file %s: %s is not a directory", path, dir)
	}
	now := "no reboot needed now"
	if _, err := os.Stat(path); err == nil {
		now = "a reboot is needed now (the file exists)"
	}
	if err := watch(dir); err != nil {
		return finding(Warn, check, "sentinel.file %s: cannot watch %s (%v): the daemon will only look every %s; %s", path, dir, err, c.Period, now)
	}
	return finding(OK, check, "sentinel.file %s: %s can be watched with inotify; %s", path, dir, now)
}

// Executable checks that argv[0] of the command set by key can be run:
// found on $PATH if not a path, a regular file, executable.
func Executable(check, key string, argv []string) Finding {
	if len(argv) == 0 {
		return finding(Fail, check, "%s is empty", key)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return finding(Fail, check, "%s %q: %v", key, strings.Join(argv, " "), unwrapExec(err))
	}
	return finding(OK, check, "%s %q: %s is executable", key, strings.Join(argv, " "), path)
}

// unwrapExec drops exec's repetition of the name.
func unwrapExec(err error) error {
	var e *exec.Error
	if errors.As(err, &e) {
		return e.Err
	}
	return err
}

// BootID checks that the boot ID can be read: it tells a reboot from a
// restart of the daemon.
func BootID(root host.Root) Finding {
	id, err := root.BootID()
	if err != nil {
		return finding(Fail, "boot ID", "%v: the daemon cannot tell a reboot from a restart without it", err)
	}
	return finding(OK, "boot ID", "%s (%s)", id, root.Path(host.BootIDPath))
}

// Metrics checks that the daemon can listen on metrics.address. If the
// address is taken, it asks whether a running kured-host is what serves
// there (client for that question; nil for a default one). An address
// that listens on every interface is a warning: anyone who reaches the
// host reads the metrics.
func Metrics(ctx context.Context, addr string, client *http.Client) Finding {
	f := metricsListen(ctx, addr, client)
	if f.Level == OK && AllInterfaces(addr) {
		_, port, _ := net.SplitHostPort(addr)
		f.Level = Warn
		f.Message += fmt.Sprintf("; it listens on every interface: use 127.0.0.1:%s unless Prometheus scrapes from another host (then firewall the port)", port)
	}
	return f
}

func metricsListen(ctx context.Context, addr string, client *http.Client) Finding {
	const check = "metrics"
	l, err := net.Listen("tcp", addr)
	if err == nil {
		_ = l.Close()
		return finding(OK, check, "metrics.address %s can be listened on", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return finding(Fail, check, "metrics.address %s: %v", addr, err)
	}
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	if servedByKuredHost(ctx, client, addr) {
		return finding(OK, check, "metrics.address %s is in use by a running kured-host (it serves kured_host_* metrics there)", addr)
	}
	return finding(Fail, check, "metrics.address %s is in use by another program: the daemon would run without metrics, trying again every few minutes; stop that program or choose another port", addr)
}

// AllInterfaces reports whether a listen address binds every interface
// (":9779", "0.0.0.0:9779", "[::]:9779").
func AllInterfaces(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(h)
	return h == "" || (ip != nil && ip.IsUnspecified())
}

func servedByKuredHost(ctx context.Context, client *http.Client, addr string) bool {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "127.0.0.1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(h, port)+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(string(body), "kured_host_")
}
