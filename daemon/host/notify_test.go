package host

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestNotifyReachesSocket listens where systemd would and checks that the
// message arrives as sent.
func TestNotifyReachesSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)

	if err := (Systemd{}).Notify("READY=1\nSTATUS=idle"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "READY=1\nSTATUS=idle" {
		t.Errorf("got %q", got)
	}
}

func TestNotifyWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := (Systemd{}).Notify("READY=1"); err != nil {
		t.Errorf("outside systemd Notify must do nothing, got %v", err)
	}
}
