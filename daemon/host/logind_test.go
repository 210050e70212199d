package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/host/logindtest"
)

// TestLogindOnARealBus runs a private dbus-daemon with a logind stand-in:
// the Reboot call arrives with interactive=false, a refusal is an error,
// and blocking shutdown inhibitors are listed with who and why.
func TestLogindOnARealBus(t *testing.T) {
	stand := logindtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := DialLogind(ctx, stand.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if err := l.Reboot(ctx); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if got := stand.Reboots(); len(got) != 1 || got[0] {
		t.Errorf("Reboot calls %v, want one with interactive=false", got)
	}

	stand.FailReboots("org.freedesktop.login1.OperationInProgress", "There's already a shutdown or sleep operation in progress")
	err = l.Reboot(ctx)
	if err == nil || !strings.Contains(err.Error(), "already a shutdown") {
		t.Errorf("a refused Reboot returned %v", err)
	}

	stand.SetInhibitors([]logindtest.Inhibitor{
		{What: "shutdown:sleep", Who: "apt", Why: "Installing packages", Mode: "block", UID: 0, PID: 4242},
		{What: "shutdown", Who: "NetworkManager", Why: "clean shutdown", Mode: "delay", PID: 12},
		{What: "sleep", Who: "gnome", Why: "lid", Mode: "block", PID: 13},
	})
	all, err := l.Inhibitors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	blocking := BlockingShutdown(all)
	if len(all) != 3 || len(blocking) != 1 || blocking[0].String() != "apt (pid 4242): Installing packages" {
		t.Errorf("inhibitors %+v, blocking %+v", all, blocking)
	}
	stand.SetInhibitors(nil)
	if all, err := l.Inhibitors(ctx); err != nil || len(BlockingShutdown(all)) != 0 {
		t.Errorf("after removal: %v, %v", all, err)
	}
}

func TestNoBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialLogind(ctx, "unix:path="+t.TempDir()+"/none"); err == nil {
		t.Error("dialled a bus that does not exist")
	}
}
