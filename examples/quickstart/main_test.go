package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// build builds the quickstart into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runQuickstart runs bin with DATABASE_URL set to url (unset if ""), and
// returns its log lines, without their timestamps.
func runQuickstart(t *testing.T, bin, url string) []string {
	t.Helper()
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if url != "" {
		cmd.Env = append(cmd.Env, "DATABASE_URL="+url)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	stamp := regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)
	var lines []string
	for l := range strings.Lines(strings.TrimSpace(string(out))) {
		lines = append(lines, stamp.ReplaceAllString(strings.TrimSuffix(l, "\n"), ""))
	}
	return lines
}

// count returns how many of lines match pattern.
func count(lines []string, pattern string) int {
	re := regexp.MustCompile(pattern)
	n := 0
	for _, l := range lines {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// Without DATABASE_URL the quickstart says so on its first line, then two
// replicas claim on the in-memory store: one works, the other skips.
func TestQuickstartWithoutDatabase(t *testing.T) {
	lines := runQuickstart(t, build(t), "")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "DATABASE_URL is not set") {
		t.Fatalf("the first line does not say DATABASE_URL is unset:\n%s", strings.Join(lines, "\n"))
	}
	for pattern, want := range map[string]int{
		`^replica-[12]: run 1: working$`:                     1,
		`^replica-[12]: skipped: .*already running as run 1`: 1,
		`^replica-[12]: done$`:                               1,
	} {
		if got := count(lines, pattern); got != want {
			t.Errorf("%d lines match %q, want %d:\n%s", got, pattern, want, strings.Join(lines, "\n"))
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d lines, want 4:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

// With DATABASE_URL the quickstart creates the table and claims on that
// Postgres: it runs the job, and skips while another replica holds the
// source.
func TestQuickstartWithDatabase(t *testing.T) {
	db := pgtest.New(t)
	bin := build(t)
	lines := runQuickstart(t, bin, db.DSN)
	if got := strings.Join(lines, "\n"); count(lines, `^this process: run \d+: working$`) != 1 ||
		count(lines, `^this process: done$`) != 1 || len(lines) != 2 {
		t.Fatalf("want one run that works and is done, got:\n%s", got)
	}

	// Another replica holds the source: the quickstart skips.
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	other, err := runclaim.New(store, runclaim.WithOwner("other-replica"), runclaim.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	run, err := other.Claim(t.Context(), "nightly-report")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Finish(context.Background(), nil) }()
	lines = runQuickstart(t, bin, db.DSN)
	if count(lines, `^this process: skipped: .*"other-replica"`) != 1 || len(lines) != 1 {
		t.Fatalf("want one skip, got:\n%s", strings.Join(lines, "\n"))
	}
}
