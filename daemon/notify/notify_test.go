package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/kured-host/kured-host/daemon/config"
)

// receiver is a local webhook that records the bodies it gets.
func receiver(t *testing.T, status int) (*httptest.Server, chan string) {
	t.Helper()
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m struct{ Message string }
		if err := json.Unmarshal(b, &m); err != nil {
			m.Message = "not JSON: " + string(b)
		}
		got <- r.Method + " " + r.URL.Path + " " + m.Message
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func notifyConfig(t *testing.T, raw ...string) config.NotifyConfig {
	t.Helper()
	c := config.Default().Notify
	for _, s := range raw {
		var u config.URL
		if err := u.UnmarshalText([]byte(s)); err != nil {
			t.Fatal(err)
		}
		c.URLs = append(c.URLs, u)
	}
	return c
}

func genericURL(srv *httptest.Server) string {
	u, _ := url.Parse(srv.URL)
	return "generic://" + u.Host + "/hook?disabletls=yes&template=json"
}

func TestSendsEachKindToTheWebhook(t *testing.T) {
	srv, got := receiver(t, http.StatusOK)
	n := New(notifyConfig(t, genericURL(srv)), "node-1", slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		kind   Kind
		reason string
		want   string
	}{
		{Drain, "", "Draining node node-1"},
		{Reboot, "", "Rebooting node node-1"},
		{Uncordon, "", "Node node-1 rebooted & uncordoned successfully!"},
		{Failure, "drain timed out", "Reboot of node node-1 failed: drain timed out"},
	} {
		n.Send(context.Background(), tc.kind, tc.reason)
		select {
		case body := <-got:
			if !strings.HasPrefix(body, "POST /hook ") || !strings.Contains(body, tc.want) {
				t.Errorf("%s: webhook got %q, want a POST to /hook with %q", tc.kind, body, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing arrived", tc.kind)
		}
	}
}

func TestAFailingServiceIsCountedAndDoesNotStop(t *testing.T) {
	bad, _ := receiver(t, http.StatusInternalServerError)
	good, got := receiver(t, http.StatusOK)
	n := New(notifyConfig(t, genericURL(bad), genericURL(good)), "node-1", slog.New(slog.DiscardHandler))
	failed := 0
	n.Failed = func() { failed++ }
	n.Send(context.Background(), Reboot, "")
	if failed != 1 {
		t.Errorf("%d failures counted, want 1 (the service answering 500)", failed)
	}
	select {
	case body := <-got:
		if !strings.Contains(body, "Rebooting node node-1") {
			t.Errorf("the working service got %q", body)
		}
	default:
		t.Error("the working service got nothing")
	}
}

// TestServicesThatCannotBePrepared: a URL the library refuses, or a
// service that cannot be prepared at start (matrix logs in to a server
// that is down), leaves a Notifier that logs, counts each message it
// cannot send and tries again; it never stops the daemon, and no log line
// shows the token.
func TestServicesThatCannotBePrepared(t *testing.T) {
	for _, raw := range []string{
		"nosuchservice://S3cr3tT0ken@127.0.0.1/x",
		"matrix://bot:S3cr3tT0ken@127.0.0.1:1/?rooms=ops",
		"matrix://bot:S3cr3tT0ken@127.0.0.1:1/?rooms=ops,,x", // the library's parser panics
	} {
		var logs bytes.Buffer
		n := New(notifyConfig(t, raw), "n", slog.New(slog.NewTextHandler(&logs, nil)))
		if n == nil {
			t.Fatalf("%s: no Notifier", raw)
		}
		failed := 0
		n.Failed = func() { failed++ }
		n.Send(context.Background(), Reboot, "")
		n.Send(context.Background(), Uncordon, "")
		out := logs.String()
		if failed != 2 {
			t.Errorf("%s: %d failures counted, want 2", raw, failed)
		}
		if c := strings.Count(out, "notify.urls[0]"); c != 3 || strings.Contains(out, "S3cr3tT0ken") {
			t.Errorf("%s: want notify.urls[0] named 3 times (start, two messages), no token:\n%s", raw, out)
		}
	}
	n := New(notifyConfig(t), "n", slog.New(slog.DiscardHandler))
	if n != nil {
		t.Fatalf("no URLs: %v", n)
	}
	n.Send(context.Background(), Reboot, "") // a nil Notifier sends nothing
}

// TestFailuresHideTheURL: the log line of a failed message names the
// service redacted, and neither it nor shoutrrr's error shows the token,
// here in the path and in a header set from the query.
func TestFailuresHideTheURL(t *testing.T) {
	const pathToken, headerToken = "S3cretPathT0ken", "H3aderT0ken"
	bad, _ := receiver(t, http.StatusInternalServerError)
	raw := []string{
		genericURL(bad) + "&@Authorization=Bearer%20" + headerToken,   // answers 500
		"generic://127.0.0.1:1/hook/" + pathToken + "?disabletls=yes", // refuses the connection
	}
	var logs bytes.Buffer
	n := New(notifyConfig(t, raw...), "node-1", slog.New(slog.NewTextHandler(&logs, nil)))
	failed := 0
	n.Failed = func() { failed++ }
	n.Send(context.Background(), Failure, "drain timed out")
	if failed != 2 {
		t.Errorf("%d failures counted, want 2", failed)
	}
	out := logs.String()
	for _, secret := range []string{pathToken, headerToken} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "url=generic://127.0.0.1:1/…") {
		t.Errorf("the log does not name the failed service:\n%s", out)
	}
}

// quoting is a service whose errors quote its URL and token, as some of
// shoutrrr's do.
type quoting struct{}

func (quoting) Send(string, *types.Params) []error {
	return []error{errors.New(`sending request: Post "https://api.telegram.org/bot110201543:T0kenT0kenT0ken/sendMessage": EOF; invalid token 110201543:T0kenT0kenT0ken`)}
}

func TestSendErrorsAreRedacted(t *testing.T) {
	u, _ := url.Parse("telegram://110201543:T0kenT0kenT0ken@telegram?chats=@channel")
	var logs bytes.Buffer
	n := &Notifier{
		services: []service{{url: u, sender: quoting{}}}, urls: []*url.URL{u},
		templates: map[Kind]config.Template{Reboot: config.MustTemplate("reboot")}, log: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	n.Send(context.Background(), Reboot, "")
	if out := logs.String(); strings.Contains(out, "T0kenT0kenT0ken") || strings.Contains(out, "110201543") || !strings.Contains(out, "url=telegram://…") {
		t.Errorf("log:\n%s", out)
	}
}
