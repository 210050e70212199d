package block

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Alerts blocks while Prometheus has active alerts, as kured does: alerts
// whose names match Filter are ignored, or, with MatchOnly, are the only
// ones that count; with FiringOnly, pending alerts do not count.
type Alerts struct {
	URL        *url.URL
	Filter     *regexp.Regexp
	MatchOnly  bool
	FiringOnly bool
	Client     *http.Client
}

var _ Blocker = (*Alerts)(nil)

// Kind implements Blocker.
func (a *Alerts) Kind() string { return "alerts" }

type alertsResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	} `json:"data"`
}

// Check implements Blocker.
func (a *Alerts) Check(ctx context.Context) (string, error) {
	u := a.URL.JoinPath("api", "v1", "alerts")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return "", fmt.Errorf("ask Prometheus for alerts: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("ask Prometheus for alerts: %s: %s", u, resp.Status)
	}
	var r alertsResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", fmt.Errorf("read Prometheus alerts: %w", err)
	}
	if r.Status != "success" {
		return "", fmt.Errorf("prometheus answered %q: %s", r.Status, r.Error)
	}
	var names []string
	for _, al := range r.Data.Alerts {
		name := al.Labels["alertname"]
		if a.FiringOnly && al.State != "firing" {
			continue
		}
		if a.Filter != nil && a.Filter.MatchString(name) != a.MatchOnly {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	slices.Sort(names)
	return "active Prometheus alerts: " + strings.Join(names, ", "), nil
}
