package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/inert"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// Texts a job or an attacker may put in a run, each with a character that
// acts on a terminal or hides in it.
const (
	// An error text that sets a window title, erases the line, recolours,
	// moves the cursor with a C1 CSI, rings the bell and rewrites the line
	// with a carriage return.
	hostileError = "boom\x1b]0;owned\x07\x1b[2K\x1b[31mred\u009b1A\a\rfine\ttab\nline\x7f"
	// An owner reversed by a right-to-left override, and one with a
	// zero-width space.
	hostileOwner = "host-\u202e1-tsoh"
	// A source stored before ValidateSource refused invisible characters:
	// it reads "nightly".
	legacySource = "night\u200bly"
)

// insertRun writes a run row directly, as an older release, another
// client or a job's own error text may have left it.
func insertRun(t *testing.T, db *pgtest.DB, source, status, owner, errText string) int64 {
	t.Helper()
	var id int64
	finished := "pg_catalog.clock_timestamp()"
	if status == "running" {
		finished = "NULL"
	}
	err := db.Pool.QueryRow(t.Context(), `INSERT INTO public.runclaim_runs
	(source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
VALUES ($1, $2, $3, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + interval '1 hour',
	pg_catalog.clock_timestamp(), `+finished+`, nullif($4, ''))
RETURNING id`, source, status, owner, errText).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// checkPrintable fails the test if out holds a character that acts on a
// terminal or hides in it: any control character but the newline that ends
// a line, a format character, a line separator, or invalid UTF-8.
func checkPrintable(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not valid UTF-8: %q", what, out)
	}
	for i, r := range out {
		if r != '\n' && inert.NeedsEscape(r) {
			t.Errorf("%s: raw %U at offset %d in output:\n%q", what, r, i, out)
			return
		}
	}
}

// TestTerminalEscapes: what runs carry (error texts, owners, sources stored
// by older releases) reaches the operator's terminal escaped, in tables, in
// JSON (which still decodes to the exact text) and in messages; and a
// source that ValidateSource now refuses can still be listed, read and
// released.
func TestTerminalEscapes(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	failedID := insertRun(t, db, "nightly", "failed", hostileOwner, hostileError)
	runningID := insertRun(t, db, "nightly", "running", "pod\u200b-7", "")
	legacyID := insertRun(t, db, legacySource, "running", hostileOwner, "")

	t.Run("history table", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "history", "nightly")
		checkPrintable(t, "history", r.stdout)
		for _, want := range []string{
			`boom\x1b]0;owned\x07\x1b[2K\x1b[31mred\u009b1A\x07\rfine\ttab\nline\x7f`,
			`host-\u202e1-tsoh`,
			`pod\u200b-7`,
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("history does not show %s:\n%s", want, r.stdout)
			}
		}
	})
	t.Run("history JSON", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "history", "nightly", "--json")
		checkPrintable(t, "history --json", r.stdout)
		objs := decodeObjects(t, r.stdout, historyKeys...)
		if len(objs) != 2 || objs[0]["owner"] != "pod\u200b-7" || objs[1]["owner"] != hostileOwner || objs[1]["error"] != hostileError {
			t.Errorf("JSON does not decode to the stored text:\n%s", r.stdout)
		}
		if num(t, objs[1]["run_id"]) != float64(failedID) {
			t.Errorf("run IDs %v, want %d second", objs, failedID)
		}
	})
	t.Run("status", func(t *testing.T) {
		r := mustRun(t, db, exitOK, "status")
		checkPrintable(t, "status", r.stdout)
		for _, want := range []string{`night\u200bly`, `host-\u202e1-tsoh`, `pod\u200b-7`} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status does not show %s:\n%s", want, r.stdout)
			}
		}
		r = mustRun(t, db, exitOK, "status", "--json")
		checkPrintable(t, "status --json", r.stdout)
		var lists struct{ Running []statusJSON }
		err := json.Unmarshal([]byte(r.stdout), &lists)
		got := lists.Running
		if err != nil || len(got) != 2 {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		sources := map[string]string{got[0].Source: got[0].Owner, got[1].Source: got[1].Owner}
		if sources[legacySource] != hostileOwner || sources["nightly"] != "pod\u200b-7" {
			t.Errorf("status --json decodes to %+v", got)
		}
	})
	t.Run("a stored source with an invisible character", func(t *testing.T) {
		// It is shown by status (above) and released by its ID; a command
		// that names it is refused, as a claim of it is.
		if err := runclaim.ValidateSource(legacySource); err == nil {
			t.Fatalf("ValidateSource(%q) accepts it", legacySource)
		}
		r := runCLI(t, db, nil, "history", legacySource)
		checkPrintable(t, "history", r.stdout+r.stderr)
		if r.code != exitUsage || !strings.Contains(r.stderr, "U+200B") {
			t.Errorf("history of the stored source: %+v, want a usage error naming U+200B", r)
		}
		r = mustRun(t, db, exitOK, "release", strconv.FormatInt(legacyID, 10), "--yes")
		checkPrintable(t, "release", r.stdout+r.stderr)
		if want := fmt.Sprintf(`released run %d of "night\u200bly" (held by host-\u202e1-tsoh`, legacyID); !strings.HasPrefix(r.stdout, want) {
			t.Errorf("release says %q, want it to start with %q", r.stdout, want)
		}
		// Claims of it are refused, by the library and by exec.
		if r := runCLI(t, db, nil, "exec", "--source", legacySource, "--", "true"); r.code != exitUsage {
			t.Errorf("exec of %q: %+v, want a usage error", legacySource, r)
		}
	})
	t.Run("release question", func(t *testing.T) {
		r := runCLI(t, db, strings.NewReader("n\n"), "release", strconv.FormatInt(runningID, 10))
		checkPrintable(t, "release question", r.stderr)
		if !strings.Contains(r.stderr, `held by pod\u200b-7?`) {
			t.Errorf("question: %q", r.stderr)
		}
	})
	t.Run("errors", func(t *testing.T) {
		// Command line mistakes and errors that carry what the operator
		// typed are escaped too.
		for _, args := range [][]string{
			{"status", "--\x1b[31mflag"},
			{"history", "night\x1b[2Kly"},
			{"history", "nightly", "--limit", "\x1b[2K"},
			{"release", "--source", "a\u009bb", "--yes"},
			{"--table", "x\x1b.y", "status"},
		} {
			r := runCLI(t, db, nil, args...)
			if r.code == exitOK {
				t.Errorf("%q: exit 0", args)
			}
			checkPrintable(t, fmt.Sprintf("%q", args), r.stdout+r.stderr)
		}
	})
}

func TestVisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain ascii, ünïcödé and 😀": "plain ascii, ünïcödé and 😀",
		`C:\path\`:                   `C:\path\`,
		"\x1b[31m":                   `\x1b[31m`,
		"a\tb\nc\rd\x00":             `a\tb\nc\rd\x00`,
		"\u0085\u009b":               `\u0085\u009b`,
		"\u202eabc\u2066\u2069":      `\u202eabc\u2066\u2069`,
		"\u200b\u200d\ufeff\u00ad":   `\u200b\u200d\ufeff\u00ad`,
		"a\u2028b\u2029":             `a\u2028b\u2029`,
		"y\ufe0f\U000e0041":          `y\ufe0f\U000e0041`,
		"bad \xff\xfe utf8":          `bad \xff\xfe utf8`,
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %s, want %s", in, got, want)
		}
	}
	if got, want := visibleLines("a:\n\tb\r\x1b"), "a:\n\tb\\r\\x1b"; got != want {
		t.Errorf("visibleLines = %q, want %q", got, want)
	}
	// jsonEscape keeps the values: every string decodes to what it was.
	for _, s := range []string{hostileError, hostileOwner, legacySource, "\U000e0041", "ok"} {
		var b strings.Builder
		if err := writeJSON(&b, []string{s}); err != nil {
			t.Fatal(err)
		}
		checkPrintable(t, "writeJSON", b.String())
		var got []string
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil || len(got) != 1 || got[0] != s {
			t.Errorf("writeJSON(%q) = %s, decodes to %q (%v)", s, b.String(), got, err)
		}
	}
}
