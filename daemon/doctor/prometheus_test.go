package doctor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kured-host/kured-host/daemon/block"
)

func TestPrometheus(t *testing.T) {
	const password, token = "pr0mPassw0rd", "qu3ryT0ken"
	tests := []struct {
		name   string
		status int
		body   string
		level  Level
		in     string
	}{
		{"refused credentials", http.StatusUnauthorized, "no", Fail,
			"ask Prometheus at http://…@127.0.0.1:"},
		{"no alert", http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[]}}`, OK,
			"answers the query for ALERTS; no alert holds a reboot back now"},
		{"an alert", http.StatusOK, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"ALERTS","alertname":"KubeNodeNotReady","alertstate":"firing"},"value":[1764000000,"1"]}]}}`, OK,
			"answers the query for ALERTS; it holds a reboot back now: active Prometheus alerts: KubeNodeNotReady"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			u, err := url.Parse(strings.Replace(srv.URL, "http://", "http://kured:"+password+"@", 1) + "/?token=" + token)
			if err != nil {
				t.Fatal(err)
			}
			f := Prometheus(context.Background(), &block.Alerts{URL: u, Timeout: 5 * time.Second})
			if f.Level != tt.level || f.Check != "prometheus" || !strings.Contains(f.Message, tt.in) {
				t.Errorf("got %s; want level %s and %q", f, tt.level, tt.in)
			}
			if s := f.String(); strings.Contains(s, password) || strings.Contains(s, token) {
				t.Errorf("the finding shows a secret: %s", s)
			}
		})
	}
}
