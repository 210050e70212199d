package kube

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestServerClock(t *testing.T) {
	server := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", server.Format(http.TimeFormat))
	}))
	defer srv.Close()
	local := server.Add(-90 * time.Second) // this host is 90 s behind
	c := NewServerClock()
	c.now = func() time.Time { return local }
	if _, seen := c.Offset(); seen {
		t.Fatal("offset before any reply")
	}
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	off, seen := c.Offset()
	if !seen || off < 90*time.Second || off > 91*time.Second {
		t.Errorf("offset %s, want about 90.5 s", off)
	}
	if got := c.Now().Sub(server); got < 0 || got > time.Second {
		t.Errorf("server now off by %s", got)
	}
}

// TestServerClockNarrows: replies at different points of the server's
// second narrow the estimate well below Date's one-second resolution, and
// a clock step on this host starts the estimate over.
func TestServerClockNarrows(t *testing.T) {
	for _, tc := range []struct {
		name string
		true time.Duration
	}{
		{"host behind", 90*time.Second + 300*time.Millisecond},
		{"host ahead", -(42*time.Second + 870*time.Millisecond)},
		{"in step", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewServerClock()
			local := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			rtt := 2 * time.Millisecond
			reply := func() {
				sent := local
				stamped := sent.Add(rtt / 2).Add(tc.true).Truncate(time.Second)
				local = local.Add(rtt)
				c.observe(sent, local, stamped)
			}
			reply()
			// From the first reply: a host whose clock the reply allows
			// keeps it; one further off is corrected to within a second.
			if off, _ := c.Offset(); (tc.true == 0 && off != 0) || (off-tc.true).Abs() > time.Second {
				t.Errorf("offset %s after one reply, want %s (within a second)", off, tc.true)
			}
			for range 40 {
				reply()
				local = local.Add(137 * time.Millisecond) // replies fall at varied phases
			}
			if off, _ := c.Offset(); (off - tc.true).Abs() > 20*time.Millisecond {
				t.Errorf("offset %s after 40 replies, want within 20ms of %s", off, tc.true)
			}
			// This host's clock is set back by a minute: the estimate
			// follows at once.
			local = local.Add(-time.Minute)
			tc.true += time.Minute
			reply()
			if off, _ := c.Offset(); (off - tc.true).Abs() > time.Second {
				t.Errorf("offset %s after the step, want within a second of %s", off, tc.true)
			}
		})
	}
}
