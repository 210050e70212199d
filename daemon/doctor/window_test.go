package doctor

import (
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/config"
)

func TestWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	var loc config.Location
	if err := loc.UnmarshalText([]byte("Europe/Berlin")); err != nil {
		t.Fatal(err)
	}
	days := func(ds ...config.Weekday) []config.Weekday { return ds }
	saturdayNoon := time.Date(2026, 11, 28, 12, 0, 0, 0, berlin)
	tests := []struct {
		name string
		w    config.WindowConfig
		want string // the finding, rendered
	}{
		{"no window", config.Default().Window, "ok   window: reboots may start at any time (no window set)\n"},
		{"across midnight", config.WindowConfig{Days: days(1, 2, 3, 4, 5), Start: 21 * 3600, End: 5 * 3600, TimeZone: loc},
			"ok   window: mon,tue,wed,thu,fri 21:00-05:00 Europe/Berlin; the hours after midnight belong to the day the window opened (kured: to the day they fall on). The openings of the next 7 days:\n" +
				"     Mon 2026-11-30 21:00 CET until Tue 2026-12-01 05:00 CET\n" +
				"     Tue 2026-12-01 21:00 CET until Wed 2026-12-02 05:00 CET\n" +
				"     Wed 2026-12-02 21:00 CET until Thu 2026-12-03 05:00 CET\n" +
				"     Thu 2026-12-03 21:00 CET until Fri 2026-12-04 05:00 CET\n" +
				"     Fri 2026-12-04 21:00 CET until Sat 2026-12-05 05:00 CET\n"},
		{"weekends, daytime", config.WindowConfig{Days: days(6, 0), Start: 9 * 3600, End: 17 * 3600, TimeZone: loc},
			"ok   window: sat,sun 09:00-17:00 Europe/Berlin; the openings of the next 7 days:\n" +
				"     Sat 2026-11-28 09:00 CET until Sat 2026-11-28 17:00 CET\n" +
				"     Sun 2026-11-29 09:00 CET until Sun 2026-11-29 17:00 CET\n" +
				"     Sat 2026-12-05 09:00 CET until Sat 2026-12-05 17:00 CET\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := Render(&b, Window(tt.w, saturdayNoon)); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}
