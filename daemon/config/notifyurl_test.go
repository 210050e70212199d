package config

import (
	"strings"
	"testing"
)

// TestNotifyURLs: the notification library's own parser judges each URL
// when the configuration loads; a URL it refuses names the file, the line
// and the key, keeps its secrets hidden, and kured's Teams form says what
// to write instead.
func TestNotifyURLs(t *testing.T) {
	const (
		uuid1 = "11111111-4444-4444-8444-cccccccccccc"
		uuid2 = "22222222-4444-4444-8444-cccccccccccc"
		hash  = "33333301222222222233333333333344"
		uuid3 = "44444444-4444-4444-8444-cccccccccccc"
	)
	tests := []struct {
		name, url string
		want      []string // in the error; none: valid
		hidden    []string // never in the error
	}{
		{name: "kured's Teams form", url: "teams://" + uuid1 + "@" + uuid2 + "/" + hash + "/" + uuid3 + "?host=acme.webhook.office.com",
			want:   []string{":2: notify.urls[1]: teams://…: kured's Teams form", "teams://GROUP@TENANT/ALTID/GROUPOWNER/EXTRAID?host=HOST"},
			hidden: []string{uuid1, uuid2, hash, "acme"}},
		{name: "Teams with the webhook's last part", url: "teams://" + uuid1 + "@" + uuid2 + "/" + hash + "/" + uuid3 + "/V2ESyij?host=acme.webhook.office.com"},
		{name: "Teams webhook URL", url: "teams+https://acme.webhook.office.com/webhookb2/" + uuid1 + "@" + uuid2 + "/IncomingWebhook/" + hash + "/" + uuid3 + "/V2ESyij"},
		{name: "Teams without its host", url: "teams://" + uuid1 + "@" + uuid2 + "/" + hash + "/" + uuid3 + "/V2ESyij",
			want: []string{"notify.urls[1]: teams://…: missing required host parameter"}, hidden: []string{uuid1}},
		{name: "Slack token that cannot be", url: "slack://hook:S3cr3tT0ken@webhook",
			want: []string{"notify.urls[1]: slack://…: invalid slack token format"}, hidden: []string{"S3cr3tT0ken"}},
		{name: "Slack webhook", url: "slack://hook:T00000000-B00000000-XXXXXXXXXXXXXXXXXXXXXXXX@webhook"},
		{name: "unknown service", url: "nosuchservice://S3cr3tT0ken@127.0.0.1/x",
			want: []string{`notify.urls[1]: nosuchservice://…: unknown notification service "nosuchservice" (known: `, "teams"}, hidden: []string{"S3cr3tT0ken"}},
		{name: "custom URL of a service without one", url: "telegram+https://S3cr3tT0ken@127.0.0.1/",
			want: []string{`the telegram service takes no "telegram+https" URL`}, hidden: []string{"S3cr3tT0ken"}},
		// Matrix logs in when the library initializes it: the check
		// only parses, so an unreachable server is no error.
		{name: "matrix with a user, nothing sent", url: "matrix://bot:S3cr3tT0ken@127.0.0.1:1/?rooms=ops"},
		// The library's parser panics on an empty room name: refused,
		// not a crash.
		{name: "matrix with an empty room", url: "matrix://bot:S3cr3tT0ken@127.0.0.1:1/?rooms=ops,,x",
			want: []string{"notify.urls[1]: matrix://…@127.0.0.1:1/…: the notification library cannot parse it"}, hidden: []string{"S3cr3tT0ken"}},
		{name: "generic webhook", url: "generic+https://127.0.0.1:1/hook"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, []byte("[notify]\nurls = [\n  \"generic+https://127.0.0.1:1/ok\",\n  \""+tt.url+"\",\n]\n"))
			_, err := LoadFiles(path)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			for _, w := range append([]string{path}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for _, h := range tt.hidden {
				if strings.Contains(msg, h) {
					t.Errorf("error shows %q:\n%s", h, msg)
				}
			}
		})
	}
}
