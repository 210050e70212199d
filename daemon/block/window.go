package block

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
)

// Window is the maintenance window in which a reboot may start: on Days,
// from Start to End (seconds since midnight, End up to 24 h) in Loc. An
// End before the Start crosses midnight: the part after midnight belongs
// to the day the window opened.
type Window struct {
	Days       []time.Weekday
	Start, End int
	Loc        *time.Location
	Now        func() time.Time
}

var _ Blocker = (*Window)(nil)

// KindWindow is the window's Kind.
const KindWindow = "window"

// Kind implements Blocker.
func (w *Window) Kind() string { return KindWindow }

// NewWindow is the window c configures.
func NewWindow(c config.WindowConfig) *Window {
	w := &Window{Start: int(c.Start), End: int(c.End), Loc: c.TimeZone.Location()}
	for _, d := range c.Days {
		w.Days = append(w.Days, time.Weekday(d))
	}
	return w
}

// Check implements Blocker.
func (w *Window) Check(context.Context) (string, error) {
	now := w.now()
	if w.Contains(now) {
		return "", nil
	}
	return fmt.Sprintf("outside the maintenance window (%s); it opens %s", w, w.Next(now).Format("Mon 2006-01-02 15:04 MST")), nil
}

func (w *Window) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// Always reports whether the window is every day, all day.
func (w *Window) Always() bool {
	return len(w.Days) == 7 && w.Start == 0 && w.End == 24*3600
}

// Contains reports whether t is inside the window.
func (w *Window) Contains(t time.Time) bool {
	t = t.In(w.Loc)
	s := t.Hour()*3600 + t.Minute()*60 + t.Second()
	day := t.Weekday()
	if w.Start < w.End {
		return slices.Contains(w.Days, day) && s >= w.Start && s < w.End
	}
	prev := (day + 6) % 7
	return (slices.Contains(w.Days, day) && s >= w.Start) || (slices.Contains(w.Days, prev) && s < w.End)
}

// Next returns when the window next opens after t (t itself if it is open).
func (w *Window) Next(t time.Time) time.Time {
	if w.Contains(t) {
		return t
	}
	t = t.In(w.Loc)
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, w.Loc)
	for d := 0; d <= 7; d++ {
		day := midnight.AddDate(0, 0, d)
		if !slices.Contains(w.Days, day.Weekday()) {
			continue
		}
		open := day.Add(time.Duration(w.Start) * time.Second)
		if open.After(t) {
			return open
		}
	}
	return t
}

// Opening is one opening of the window, from Open until Close (excluded).
type Opening struct{ Open, Close time.Time }

// Openings returns the openings of the window that end after t and open
// before t+d, in the window's zone; the first may be open at t. Openings
// that touch (mon-fri all day) are one.
func (w *Window) Openings(t time.Time, d time.Duration) []Opening {
	t = t.In(w.Loc)
	var out []Opening
	// From the day before: an opening across midnight may be open at t.
	for i := -1; ; i++ {
		day := time.Date(t.Year(), t.Month(), t.Day()+i, 0, 0, 0, 0, w.Loc)
		if !day.Before(t.Add(d)) {
			return out
		}
		if !slices.Contains(w.Days, day.Weekday()) {
			continue
		}
		o := Opening{Open: daySecond(day, w.Start), Close: daySecond(day, w.End)}
		if w.End <= w.Start {
			o.Close = daySecond(day.AddDate(0, 0, 1), w.End)
		}
		switch {
		case !o.Close.After(t) || !o.Open.Before(t.Add(d)):
		case len(out) > 0 && out[len(out)-1].Close.Equal(o.Open):
			out[len(out)-1].Close = o.Close
		default:
			out = append(out, o)
		}
	}
}

// daySecond is the time s seconds after day's midnight, on the clock (a
// daylight saving change on that day moves it, as it moves the window).
func daySecond(day time.Time, s int) time.Time {
	return time.Date(day.Year(), day.Month(), day.Day(), 0, 0, s, 0, day.Location())
}

func (w *Window) String() string {
	days := make([]string, len(w.Days))
	for i, d := range w.Days {
		days[i] = strings.ToLower(d.String()[:3])
	}
	clock := func(s int) string { return fmt.Sprintf("%02d:%02d", s/3600, s/60%60) }
	return fmt.Sprintf("%s %s-%s %s", strings.Join(days, ","), clock(w.Start), clock(w.End), w.Loc)
}
