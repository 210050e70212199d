// Command kured-host reboots Kubernetes nodes one slot at a time, from the
// host, with the kubelet's own credentials. See `kured-host help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	_ "time/tzdata" // window.time_zone must load on hosts without zoneinfo
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}
