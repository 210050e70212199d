package config

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"slices"
	"strings"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/matrix"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/kured-host/kured-host/daemon/redact"
)

// checkNotifyURL parses u with the notification library's own parser, the
// one that sending uses, so that a URL the library refuses is a
// configuration error naming its key and line, found by `check
// --config-only`, rather than a message that can never be sent. The
// library's router wraps every parse failure into "initialize failed";
// the steps are taken one by one here to keep the reason.
//
// Nothing is sent: the matrix service logs in to its server when it is
// initialized, so for it only its URL parser runs.
func checkNotifyURL(u *url.URL) (err error) {
	// The parser is a library's, fed what the operator wrote; a panic in
	// it must be a configuration error, not a crash.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the notification library cannot parse it (%v)", r)
		}
	}()
	r, err := router.New(log.New(io.Discard, "", 0))
	if err != nil {
		return fmt.Errorf("notification library: %w", err)
	}
	scheme, cfgURL, err := r.ExtractServiceName(u.String())
	if err != nil {
		return redact.Error(err, u)
	}
	svc, err := r.NewService(scheme)
	if err != nil {
		known := r.ListServices()
		slices.Sort(known)
		return fmt.Errorf("unknown notification service %q (known: %s)", scheme, strings.Join(known, ", "))
	}
	if cfgURL.Scheme != scheme {
		custom, ok := svc.(types.CustomURLService)
		if !ok {
			return fmt.Errorf("the %s service takes no %q URL: write %s://…", scheme, cfgURL.Scheme, scheme)
		}
		if cfgURL, err = custom.GetConfigURLFromCustom(cfgURL); err != nil {
			return redact.Error(err, u)
		}
	}
	if scheme == matrix.Scheme {
		err = (&matrix.Config{}).SetURL(cfgURL)
	} else {
		err = svc.Initialize(cfgURL, log.New(io.Discard, "", 0))
	}
	if err == nil {
		return nil
	}
	if hint := kuredTeamsHint(scheme, cfgURL); hint != "" {
		return errors.New(hint)
	}
	return redact.Error(err, u, cfgURL)
}

// kuredTeamsHint explains kured's Teams URL form, which the library used
// here refuses: kured's (teams://group@tenant/altId/groupOwner?host=…)
// lacks the last part of the webhook URL that Microsoft's current webhooks
// need. The parts are secrets, so the answer shows where each goes rather
// than the URL itself.
func kuredTeamsHint(scheme string, u *url.URL) string {
	if scheme != "teams" || len(strings.Split(strings.Trim(u.Path, "/"), "/")) != 2 {
		return ""
	}
	return "kured's Teams form teams://GROUP@TENANT/ALTID/GROUPOWNER?host=HOST lacks the webhook's last part, " +
		"which this notification library needs: write teams://GROUP@TENANT/ALTID/GROUPOWNER/EXTRAID?host=HOST " +
		"with the parts of the Teams webhook URL https://HOST/webhookb2/GROUP@TENANT/IncomingWebhook/ALTID/GROUPOWNER/EXTRAID, " +
		"or give that webhook URL itself as teams+https://HOST/webhookb2/…"
}
