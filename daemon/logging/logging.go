// Package logging builds the daemon's slog.Logger: text or JSON, and, when
// stderr is connected to the systemd journal, each line prefixed with its
// syslog priority ("<4>") so that `journalctl -p warning` selects by level.
// Every message and every string or error value is made printable
// (daemon/printable): a log line often carries text from outside, and
// journalctl shows it on a terminal.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/kured-host/kured-host/daemon/printable"
)

// Options choose the log output.
type Options struct {
	Format  string // "text" or "json"
	Level   string // "debug", "info", "warn" or "error"
	Journal bool   // stderr is the journal: add priorities, leave out the time
}

// New returns a logger writing to w.
func New(w io.Writer, o Options) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.Level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", o.Level, err)
	}
	ho := &slog.HandlerOptions{Level: level, ReplaceAttr: printableAttr}
	if !o.Journal {
		h, err := handler(w, o.Format, ho)
		if err != nil {
			return nil, err
		}
		return slog.New(h), nil
	}
	// journald stamps each line itself.
	ho.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return printableAttr(groups, a)
	}
	pw := &prefixWriter{w: w}
	inner, err := handler(pw, o.Format, ho)
	if err != nil {
		return nil, err
	}
	return slog.New(&journalHandler{mu: &sync.Mutex{}, w: pw, inner: inner}), nil
}

// printableAttr escapes what a terminal would act on in the message and
// in string and error values. The text handler quotes such values itself,
// but the JSON handler lets bidirectional controls through, and the
// message is where text from outside is most often written in.
func printableAttr(_ []string, a slog.Attr) slog.Attr {
	switch v := a.Value; {
	case v.Kind() == slog.KindString:
		if s := v.String(); printable.String(s) != s {
			a.Value = slog.StringValue(printable.String(s))
		}
	case v.Kind() == slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			a.Value = slog.StringValue(printable.String(err.Error()))
		}
	}
	return a
}

func handler(w io.Writer, format string, ho *slog.HandlerOptions) (slog.Handler, error) {
	switch format {
	case "text", "":
		return slog.NewTextHandler(w, ho), nil
	case "json":
		return slog.NewJSONHandler(w, ho), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// StderrIsJournal reports whether stderr is the stream systemd set up to the
// journal: $JOURNAL_STREAM names its device and inode.
func StderrIsJournal() bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		return false
	}
	return fmt.Sprint(st.Dev) == dev && fmt.Sprint(st.Ino) == ino
}

// journalHandler sets the priority prefix for each record before the inner
// handler writes it. The mutex is shared with derived handlers because they
// share the writer.
type journalHandler struct {
	mu    *sync.Mutex
	w     *prefixWriter
	inner slog.Handler
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w.prefix = Priority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{mu: h.mu, w: h.w, inner: h.inner.WithAttrs(as)}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{mu: h.mu, w: h.w, inner: h.inner.WithGroup(name)}
}

// Priority is the sd-daemon prefix for a level: "<7>" debug, "<6>" info,
// "<4>" warning, "<3>" error.
func Priority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

// prefixWriter writes prefix before each write; slog handlers write one
// record per Write call.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
