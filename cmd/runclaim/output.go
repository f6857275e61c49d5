package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/inert"
)

// Output: an aligned table for people by default, one JSON document with
// stable snake_case keys for scripts with --json. In JSON, times are
// RFC 3339 in UTC and durations are seconds as floats; a time or duration
// that does not apply is null, never omitted.

// table writes rows aligned in columns, as text/tabwriter would, but in
// blocks: it holds at most tableBlock rows, and prints them once it has
// that many, with each column as wide as its widest cell so far. A long
// listing is thus printed as it is read, in constant memory; a column only
// ever widens from one block to the next, and every listing of up to
// tableBlock rows is aligned as one.
type table struct {
	w      io.Writer
	widths []int      // of every column but the last, in runes
	rows   [][]string // not yet printed
	err    error      // the first write error
}

// tableBlock is how many rows a table holds before it prints them.
const tableBlock = 1000

// columnGap is the space between two columns.
const columnGap = 2

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.row(header...)
	return t
}

// row adds a row of cells, each made printable by cell.
func (t *table) row(cells ...string) {
	r := make([]string, len(cells))
	for i, c := range cells {
		r[i] = cell(c)
		if i == len(cells)-1 {
			break // the last column is not padded
		}
		for len(t.widths) <= i {
			t.widths = append(t.widths, 0)
		}
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(r[i]))
	}
	t.rows = append(t.rows, r)
	if len(t.rows) >= tableBlock {
		t.print()
	}
}

// print writes the rows held and forgets them.
func (t *table) print() {
	var b strings.Builder
	for _, r := range t.rows {
		b.Reset()
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(c)+columnGap))
			}
		}
		b.WriteByte('\n')
		if t.err == nil {
			_, t.err = io.WriteString(t.w, b.String())
		}
	}
	t.rows = t.rows[:0]
}

// flush prints the rows held and returns the first write error.
func (t *table) flush() error {
	t.print()
	return t.err
}

// maxCell is the widest a table cell gets, in runes; JSON has the full text.
const maxCell = 80

// cell makes s fit in one table cell: printable (see visible), at most
// maxCell runes, "-" if empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	s = visible(s)
	if utf8.RuneCountInString(s) > maxCell {
		r := []rune(s)
		s = string(r[:maxCell-1]) + "…"
	}
	return s
}

// visible returns s with every character inert.NeedsEscape reports shown as an
// escape, as Go writes it: \n, \t, \r, \x1b, \u202e, \U000e0041; a byte that
// is not valid UTF-8 is shown as \xff. Everything else, backslashes
// included, is left as it is. The table cells, the messages and the errors
// the commands print go through it; JSON output escapes the same
// characters its own way (see writeJSON).
func visible(s string) string { return inert.Escape(s, false) }

// visibleLines is visible, except that it keeps newlines and tabs as they
// are: for a message that may span lines, such as pgx's error for a
// connection tried on several addresses.
func visibleLines(s string) string { return inert.Escape(s, true) }

// writeJSON writes v as one indented JSON document, escaped as jsonEscape
// does.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(jsonEscape(b), '\n'))
	return err
}

// jsonEscape escapes, as \uXXXX, the characters of encoded JSON that
// inert.NeedsEscape reports and encoding/json leaves as they are (DEL, the C1
// controls, format characters, ...), so that JSON printed on a terminal
// cannot act on it either. The document decodes to the same values. Only
// string contents change: encoding/json writes no other character outside
// ASCII, and escapes C0 controls in strings itself, so a raw newline is
// one of its indents.
func jsonEscape(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		if c := b[i]; c >= 0x20 && c < 0x7f || c == '\n' { // most of it
			if out != nil {
				out = append(out, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if !inert.NeedsEscape(r) {
			if out != nil {
				out = append(out, b[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}

// jsonArray writes a JSON array one element at a time, as writeJSON would
// write the whole array, so that a long listing needs no slice of it.
type jsonArray struct {
	w      io.Writer
	indent string // of the line the array starts on: "" for a document, "  " for a field of one
	n      int    // elements written
}

// add writes v as the next element.
func (a *jsonArray) add(v any) error {
	b, err := json.MarshalIndent(v, a.indent+"  ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n" + a.indent + "  "
	if a.n == 0 {
		sep = "[\n" + a.indent + "  "
	}
	a.n++
	_, err = a.w.Write(append([]byte(sep), jsonEscape(b)...))
	return err
}

// close ends the array, without a newline after it.
func (a *jsonArray) close() error {
	end := "\n" + a.indent + "]"
	if a.n == 0 {
		end = "[]"
	}
	_, err := io.WriteString(a.w, end)
	return err
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
	Tick            *time.Time `json:"tick"`             // null for a plain claim
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
		Tick:        jsonTime(r.Tick),
		Error:       r.Error,
	}
	if !r.FinishedAt.IsZero() {
		s := seconds(runEnd(r).Sub(r.StartedAt))
		out.DurationSeconds = &s
	}
	return out
}

// formatTick is a run's tick for a table: "-" for a plain claim's run.
func formatTick(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return formatTime(t)
}

// runEnd is the end of a finished run's duration: when it finished, or,
// for an expired run, its last heartbeat, the last time its holder was
// known to be at work. An expired run's finished_at is when a claim (or
// the holder's own late Finish) found its lease over, which may be long
// after the holder stopped.
func runEnd(r runclaim.RunRecord) time.Time {
	if r.Status == runclaim.StatusExpired && !r.HeartbeatAt.IsZero() && r.HeartbeatAt.Before(r.FinishedAt) {
		return r.HeartbeatAt
	}
	return r.FinishedAt
}

// runDuration is a run's duration for a table; an expired run's is "≥"
// the time to its last heartbeat (see runEnd).
func runDuration(r runclaim.RunRecord) string {
	if r.FinishedAt.IsZero() {
		return "running"
	}
	d := formatDuration(runEnd(r).Sub(r.StartedAt))
	if r.Status == runclaim.StatusExpired {
		return "≥" + d
	}
	return d
}

// runList prints runs as history and release do, one at a time: a table,
// or with --json an array of runJSON. Nothing is printed before the first
// run, so that a caller can say "no runs" instead.
type runList struct {
	c    *cli
	tab  *table     // once a run is added, without --json
	arr  *jsonArray // with --json
	runs int        // added so far
}

func (c *cli) newRunList() *runList {
	l := &runList{c: c}
	if c.json {
		l.arr = &jsonArray{w: c.stdout}
	}
	return l
}

// add prints r, or holds it in the table's current block.
func (l *runList) add(r runclaim.RunRecord) error {
	l.runs++
	if l.arr != nil {
		return l.arr.add(toRunJSON(r))
	}
	if l.tab == nil {
		l.tab = newTable(l.c.stdout, "RUN", "SOURCE", "STATUS", "OWNER", "STARTED", "TICK", "DURATION", "ERROR")
	}
	l.tab.row(fmt.Sprint(r.ID), r.Source, string(r.Status), r.Owner, formatTime(r.StartedAt), formatTick(r.Tick), runDuration(r), r.Error)
	return l.tab.err // stop reading once stdout is gone ("| head")
}

// close prints what is held and ends the JSON array (an empty one if no run
// was added) and its document.
func (l *runList) close() error {
	if l.arr != nil {
		if err := l.arr.close(); err != nil {
			return err
		}
		_, err := io.WriteString(l.c.stdout, "\n")
		return err
	}
	if l.tab != nil {
		return l.tab.flush()
	}
	return nil
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
