package doctor

import (
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/block"
	"github.com/kured-host/kured-host/daemon/config"
)

// Window shows the maintenance window as the daemon applies it: the
// openings of the week from now, in the window's zone. kured counts the
// hours after midnight of a window across midnight for the day they fall
// on, kured-host for the day the window opened: the list shows which
// calendar hours that gives, rather than leaving the difference to the
// docs.
func Window(c config.WindowConfig, now time.Time) Finding {
	w := block.NewWindow(c)
	if w.Always() {
		return finding(OK, "window", "reboots may start at any time (no window set)")
	}
	const layout = "Mon 2006-01-02 15:04 MST"
	var b strings.Builder
	for _, o := range w.Openings(now, 7*24*time.Hour) {
		b.WriteString(o.Open.Format(layout) + " until " + o.Close.Format(layout) + "\n")
	}
	f := finding(OK, "window", "%s; the openings of the next 7 days:", w)
	if w.End <= w.Start {
		f.Message = w.String() + "; the hours after midnight belong to the day the window opened (kured: to the day they fall on). The openings of the next 7 days:"
	}
	f.Detail = b.String()
	return f
}
