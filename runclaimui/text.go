package runclaimui

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runclaim/runclaim/internal/inert"
)

// clean makes a text from the database inert for display, on top of
// html/template's escaping: a control character (ANSI's escape among
// them), a bidirectional override or isolate, another invisible
// character, and a byte that is not UTF-8 are shown as a visible escape
// (\x1b, \u202e), so that an error text cannot colour, reorder or hide
// what the page shows. Newlines and tabs stay. It is the CLI's escaping.
func clean(s string) string { return inert.Escape(s, true) }

// firstLine is the cleaned first line of s, cut to at most n runes.
func firstLine(n int, s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = clean(s)
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	return s
}

// duration shows d rounded for a reader: 1.2s, 3m4s, 2h5m, 3d4h.
func duration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		s = d.Round(time.Second).String()
	case d < 48*time.Hour:
		s = strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := d / (24 * time.Hour)
		s = fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
	}
	if neg {
		return "-" + s
	}
	return s
}

// ago shows how long before now t was: "3m4s ago", or "in 2m" when later.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	if d := now.Sub(t); d >= 0 {
		return duration(d) + " ago"
	}
	return "in " + duration(t.Sub(now))
}

// at is t in UTC, to the second.
func at(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
