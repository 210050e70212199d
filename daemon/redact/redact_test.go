package redact

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		secrets []string // must not appear in the result
	}{
		{"http plain", "http://prometheus:9090", "http://prometheus:9090", nil},
		{"https root path", "https://prom.example:9090/", "https://prom.example:9090/", nil},
		{"http userinfo and query", "http://alice:s3cr3t@prom:9090/prometheus?token=T0KEN#frag", "http://…@prom:9090/…",
			[]string{"alice", "s3cr3t", "T0KEN", "prometheus", "frag"}},
		{"https user only", "https://alice@prom:9090", "https://…@prom:9090", []string{"alice"}},
		{"ifttt key is the host", "ifttt://K3YK3YK3Y/?events=reboot", "ifttt://…", []string{"K3YK3YK3Y", "reboot"}},
		{"ifttt key alone", "ifttt://K3YK3YK3Y", "ifttt://…", []string{"K3YK3YK3Y"}},
		{"slack token in userinfo, channel as host", "slack://xoxb:123456-ABCDEF@C001CHANNEL?color=good", "slack://…",
			[]string{"xoxb", "123456-ABCDEF", "C001CHANNEL"}},
		{"slack webhook", "slack://hook:WNA3PBYV6-F20DUQND3RQ@webhook", "slack://…", []string{"WNA3PBYV6"}},
		{"slack old format", "slack://T0000TOKA/B0000TOKB/X0000TOKC", "slack://…", []string{"T0000TOKA", "B0000TOKB", "X0000TOKC"}},
		{"telegram", "telegram://110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw@telegram?chats=@mychannel", "telegram://…",
			[]string{"110201543", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "mychannel"}},
		{"discord", "discord://T0K3NT0K3N@123456789012345678", "discord://…", []string{"T0K3NT0K3N", "123456789012345678"}},
		{"teams", "teams://group@tenant/altId/groupOwner?host=example.webhook.office.com", "teams://…", []string{"group", "tenant", "altId"}},
		{"pushover", "pushover://shoutrrr:apiT0ken@userK3y/?devices=phone", "pushover://…", []string{"apiT0ken", "userK3y"}},
		{"pushbullet", "pushbullet://apiT0kenX/device", "pushbullet://…", []string{"apiT0kenX"}},
		{"wecom", "wecom://weK3Y", "wecom://…", []string{"weK3Y"}},
		{"notifiarr", "notifiarr://apiK3Y?channel=1234", "notifiarr://…", []string{"apiK3Y"}},
		{"join", "join://shoutrrr:apiK3Y@join/?devices=a", "join://…", []string{"apiK3Y"}},
		{"generic+https keeps the server", "generic+https://hooks.example.com/services/SECRETPATH?@Authorization=Bearer%20T0KEN", "generic+https://hooks.example.com/…",
			[]string{"SECRETPATH", "T0KEN", "Bearer"}},
		{"generic", "generic://hooks.example.com:8080/hook?template=json", "generic://hooks.example.com:8080/…", []string{"template"}},
		{"smtp with password", "smtp://mailer:p4ssw0rd@smtp.example.com:587/?fromaddress=a@example.com&toaddresses=b@example.com",
			"smtp://…@smtp.example.com:587/…", []string{"mailer", "p4ssw0rd", "fromaddress"}},
		{"gotify", "gotify://gotify.example.com/T0KEN123", "gotify://gotify.example.com/…", []string{"T0KEN123"}},
		{"matrix", "matrix://bot:p4ss@matrix.example.com/?rooms=!room", "matrix://…@matrix.example.com/…", []string{"p4ss", "room"}},
		{"ntfy", "ntfy://user:p4ss@ntfy.sh/topic", "ntfy://…@ntfy.sh/…", []string{"p4ss", "topic"}},
		{"unknown scheme hides the host", "nosuchservice://T0K3N", "nosuchservice://…", []string{"T0K3N"}},
		{"opaque", "slack:T0K3N", "slack:…", []string{"T0K3N"}},
		{"logger has nothing to hide", "logger://", "logger://", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			got := URL(u)
			if got != tt.want {
				t.Errorf("URL(%s) = %q, want %q", tt.in, got, tt.want)
			}
			for _, s := range tt.secrets {
				if strings.Contains(got, s) {
					t.Errorf("URL(%s) = %q shows %q", tt.in, got, s)
				}
			}
		})
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h:9090/x":  "https://…@h:9090/…",
		"https://u:p/ss@h:9090": "https://…",
		"%zz":                   "…",
		"":                      "",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	prom, _ := url.Parse("https://alice:pr0mPassw0rd@prom.example:9090/?token=qu3ryT0ken")
	tg, _ := url.Parse("telegram://110201543:AAHdqTcvCH1vGWJx@telegram?chats=@channel")
	tests := []struct {
		name, in, want string
	}{
		{"net/http error", `Get "https://alice:***@prom.example:9090/api/v1/query?query=ALERTS&token=qu3ryT0ken": dial tcp: connection refused`,
			`Get "https://…@prom.example:9090/…": dial tcp: connection refused`},
		{"URL built by a service from tokens", `sending request: Post "https://api.telegram.org/bot110201543:AAHdqTcvCH1vGWJx/sendMessage": EOF`,
			`sending request: Post "https://api.telegram.org/…": EOF`},
		{"a bare token", "invalid telegram token: 110201543:AAHdqTcvCH1vGWJx", "invalid telegram token: …"},
		{"a bare password", "bad password pr0mPassw0rd.", "bad password …."},
		{"URL at the end of a sentence", "cannot parse slack://T0K3NT0K3N: failed", "cannot parse slack://…: failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Text(tt.in, prom, tg); got != tt.want {
				t.Errorf("Text(%q)\n = %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	u, _ := url.Parse("https://alice:pr0mPassw0rd@prom:9090/?token=qu3ryT0ken")
	uerr := &url.Error{Op: "Get", URL: "https://alice:***@prom:9090/api/v1/query?query=ALERTS&token=qu3ryT0ken", Err: context.DeadlineExceeded}
	err := Error(fmt.Errorf("ask: %w", uerr), u)
	if s := err.Error(); strings.Contains(s, "qu3ryT0ken") || strings.Contains(s, "alice") || !strings.Contains(s, "prom:9090") {
		t.Errorf("Error() = %q", s)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is no longer sees context.DeadlineExceeded")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		t.Error("errors.As reaches the *url.Error with the whole URL")
	}
	if Error(nil, u) != nil {
		t.Error("Error(nil) is not nil")
	}
}
