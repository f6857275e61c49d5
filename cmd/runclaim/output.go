package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
)

// Output: an aligned table for people by default, one JSON document with
// stable snake_case keys for scripts with --json. In JSON, times are
// RFC 3339 in UTC and durations are seconds as floats; a time or duration
// that does not apply is null, never omitted.

// table writes rows aligned in columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// maxCell is the widest a table cell gets, in runes; JSON has the full text.
const maxCell = 80

// cell makes s fit in one table cell: one line, no tabs, at most maxCell
// runes, "-" if empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > maxCell {
		r := []rune(s)
		s = string(r[:maxCell-1]) + "…"
	}
	return s
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatTime is a time for a table: RFC 3339 to the second, local zone.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// formatDuration is a duration for a table: "850ms", "12.3s", "4m05s",
// "3h12m", "2d04h"; negative durations keep their sign.
func formatDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	if d < time.Second {
		return sign + d.Round(time.Millisecond).String()
	}
	if r := d.Round(100 * time.Millisecond); r < time.Minute {
		return fmt.Sprintf("%s%.1fs", sign, r.Seconds())
	}
	if r := d.Round(time.Second); r < time.Hour {
		return fmt.Sprintf("%s%dm%02ds", sign, r/time.Minute, r%time.Minute/time.Second)
	}
	if r := d.Round(time.Minute); r < 24*time.Hour {
		return fmt.Sprintf("%s%dh%02dm", sign, r/time.Hour, r%time.Hour/time.Minute)
	}
	r := d.Round(time.Hour)
	return fmt.Sprintf("%s%dd%02dh", sign, r/(24*time.Hour), r%(24*time.Hour)/time.Hour)
}

// seconds is a duration in JSON: seconds, to the microsecond.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1e6) / 1e6
}

// jsonTime is a time in JSON: RFC 3339 in UTC, or null when zero.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// runJSON is a run as history and release print it.
type runJSON struct {
	RunID           int64      `json:"run_id"`
	Source          string     `json:"source"`
	Status          string     `json:"status"`
	Owner           string     `json:"owner"`
	StartedAt       *time.Time `json:"started_at"`
	LeaseUntil      *time.Time `json:"lease_until"`
	HeartbeatAt     *time.Time `json:"heartbeat_at"`
	FinishedAt      *time.Time `json:"finished_at"`      // null while running
	DurationSeconds *float64   `json:"duration_seconds"` // null while running
	Error           string     `json:"error"`            // "" if none
}

func toRunJSON(r runclaim.RunRecord) runJSON {
	out := runJSON{
		RunID:       r.ID,
		Source:      r.Source,
		Status:      string(r.Status),
		Owner:       r.Owner,
		StartedAt:   jsonTime(r.StartedAt),
		LeaseUntil:  jsonTime(r.LeaseUntil),
		HeartbeatAt: jsonTime(r.HeartbeatAt),
		FinishedAt:  jsonTime(r.FinishedAt),
		Error:       r.Error,
	}
	if !r.FinishedAt.IsZero() {
		s := seconds(r.FinishedAt.Sub(r.StartedAt))
		out.DurationSeconds = &s
	}
	return out
}

// runDuration is a run's duration for a table.
func runDuration(r runclaim.RunRecord) string {
	if r.FinishedAt.IsZero() {
		return "running"
	}
	return formatDuration(r.FinishedAt.Sub(r.StartedAt))
}

// writeRuns prints runs as history and release do.
func (c *cli) writeRuns(runs []runclaim.RunRecord) error {
	if c.json {
		out := make([]runJSON, 0, len(runs))
		for _, r := range runs {
			out = append(out, toRunJSON(r))
		}
		return writeJSON(c.stdout, out)
	}
	t := newTable(c.stdout, "RUN", "SOURCE", "STATUS", "OWNER", "STARTED", "DURATION", "ERROR")
	for _, r := range runs {
		t.row(fmt.Sprint(r.ID), r.Source, string(r.Status), r.Owner, formatTime(r.StartedAt), runDuration(r), r.Error)
	}
	return t.flush()
}

// serialize returns stdout and stderr wrapped so that writes to them do not
// interleave or race when they are not files: the command's output is then
// copied by goroutines of os/exec while exec writes its own messages.
// Files are returned as they are, so that the command inherits them.
func serialize(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	_, outFile := stdout.(*os.File)
	_, errFile := stderr.(*os.File)
	if outFile && errFile {
		return stdout, stderr
	}
	mu := new(sync.Mutex)
	wrap := func(w io.Writer) io.Writer {
		if _, ok := w.(*os.File); ok {
			return w
		}
		return &lockedWriter{mu: mu, w: w}
	}
	return wrap(stdout), wrap(stderr)
}

// lockedWriter serialises writes to w under a mutex it may share.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
