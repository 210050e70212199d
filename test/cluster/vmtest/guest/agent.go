package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"syscall"
	"time"
)

// RunRequest is a shell command for the agent to run as root.
type RunRequest struct {
	Cmd            string `json:"cmd"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// RunResult is its exit status (-1: killed or not started) and combined
// output.
type RunResult struct {
	Code   int    `json:"code"`
	Output string `json:"output"`
}

// commandEnv is what a root shell on a Debian console has, without the
// colours and pagers meant for a person.
var commandEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root", "LANG=C.UTF-8", "TERM=dumb",
	"SYSTEMD_COLORS=0", "SYSTEMD_PAGER=", "DEBIAN_FRONTEND=noninteractive",
}

func runAgent(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	listen := fs.String("listen", ":7050", "address to serve the test driver on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, boot) })
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		var req RunRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res := run(r.Context(), req)
		log.Info("ran", "cmd", req.Cmd, "code", res.Code)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("serving", "address", l.Addr().String(), "boot_id", boot)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// run runs req.Cmd with sh -c in its own process group, killed whole when
// the timeout (default 2 minutes) passes or the driver goes away.
func run(ctx context.Context, req RunRequest) RunResult {
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", req.Cmd)
	cmd.Env = commandEnv
	cmd.Dir = "/root"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A command that leaves a process behind holding its output must not
	// hold up the answer.
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return RunResult{Code: 0, Output: string(out)}
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return RunResult{Code: exit.ExitCode(), Output: string(out)}
	}
	return RunResult{Code: -1, Output: string(out) + "\nagent: " + err.Error()}
}
