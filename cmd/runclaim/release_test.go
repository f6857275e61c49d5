package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
)

func TestRelease(t *testing.T) {
	t.Parallel()
	db, store := setup(t)

	status := func(t *testing.T, id int64) runclaim.Status {
		t.Helper()
		var s string
		if err := db.Pool.QueryRow(t.Context(), `SELECT status FROM runclaim_runs WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return runclaim.Status(s)
	}

	t.Run("by source with --yes", func(t *testing.T) {
		run := hold(t, store, "stuck", "host-a")
		r := mustRun(t, db, exitOK, "release", "stuck", "--yes")
		if want := fmt.Sprintf(`released run %d of "stuck" (held by host-a since `, run.ID); !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q, want %q", r.stdout, want)
		}
		if s := status(t, run.ID); s != runclaim.StatusReleased {
			t.Errorf("status %s, want released", s)
		}
		// The holder learns it.
		if err := run.Heartbeat(t.Context()); !errors.Is(err, runclaim.ErrLeaseLost) {
			t.Errorf("holder's heartbeat: %v, want ErrLeaseLost", err)
		}
		// Nothing left to release.
		r = runCLI(t, db, nil, "release", "stuck", "--yes")
		if r.code != exitError || !strings.Contains(r.stderr, `no running run of "stuck"`) {
			t.Errorf("second release: %+v", r)
		}
	})

	t.Run("by run ID, JSON", func(t *testing.T) {
		run := hold(t, store, "by-id", "host-b")
		r := mustRun(t, db, exitOK, "release", "-y", "--json", strconv.FormatInt(run.ID, 10))
		objs := decodeObjects(t, r.stdout, historyKeys...)
		if len(objs) != 1 || num(t, objs[0]["run_id"]) != float64(run.ID) || objs[0]["status"] != "released" ||
			objs[0]["error"] != "released by an operator" || objs[0]["finished_at"] == nil {
			t.Errorf("JSON: %s", r.stdout)
		}
		r = runCLI(t, db, nil, "release", "--yes", "--id", strconv.FormatInt(run.ID, 10))
		if r.code != exitError || !strings.Contains(r.stderr, fmt.Sprintf("run %d is not running", run.ID)) {
			t.Errorf("release of a released run: %+v", r)
		}
	})

	t.Run("numeric source", func(t *testing.T) {
		run := hold(t, store, "2024", "host-c")
		// As an argument, 2024 is a run ID, and there is no such run.
		if r := runCLI(t, db, nil, "release", "2024", "--yes"); r.code != exitError || !strings.Contains(r.stderr, "run 2024 is not running") {
			t.Errorf("release 2024: %+v", r)
		}
		mustRun(t, db, exitOK, "release", "--source", "2024", "--yes")
		if s := status(t, run.ID); s != runclaim.StatusReleased {
			t.Errorf("status %s, want released", s)
		}
	})

	t.Run("confirmed on stdin", func(t *testing.T) {
		run := hold(t, store, "ask", "host-d")
		question := fmt.Sprintf(`Release run %d of "ask" held by host-d? [y/N] `, run.ID)

		for _, answer := range []string{"n\n", "\n", "", "yess\n"} {
			r := runCLI(t, db, strings.NewReader(answer), "release", "ask")
			if r.code != exitError || !strings.Contains(r.stderr, question) || !strings.Contains(r.stderr, "not released") {
				t.Errorf("answer %q: %+v", answer, r)
			}
			if s := status(t, run.ID); s != runclaim.StatusRunning {
				t.Fatalf("answer %q: status %s, want running", answer, s)
			}
		}
		r := runCLI(t, db, strings.NewReader("y\n"), "release", "ask")
		if r.code != exitOK || !strings.Contains(r.stderr, question) || !strings.Contains(r.stdout, "released run") {
			t.Errorf("answer y: %+v", r)
		}
		if s := status(t, run.ID); s != runclaim.StatusReleased {
			t.Errorf("status %s, want released", s)
		}
		run = hold(t, store, "ask", "host-d")
		if r := runCLI(t, db, strings.NewReader("YES\n"), "release", "ask"); r.code != exitOK {
			t.Errorf("answer YES: %+v", r)
		}
		if s := status(t, run.ID); s != runclaim.StatusReleased {
			t.Errorf("status %s, want released", s)
		}
	})

	t.Run("no terminal without --yes", func(t *testing.T) {
		run := hold(t, store, "cron", "host-e")
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		fmt.Fprintln(pw, "y") // even a yes in a pipe is no confirmation
		pw.Close()
		devNull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer devNull.Close()
		for name, stdin := range map[string]*os.File{"pipe": pr, "/dev/null": devNull} {
			r := runCLI(t, db, stdin, "release", "cron")
			if r.code != exitUsage || !strings.Contains(r.stderr, "not a terminal") || !strings.Contains(r.stderr, "--yes") {
				t.Errorf("%s: %+v", name, r)
			}
		}
		if s := status(t, run.ID); s != runclaim.StatusRunning {
			t.Errorf("status %s, want running", s)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"release"},
			{"release", "a", "--source", "b"},
			{"release", "--id", "1", "--source", "b"},
			{"release", "--id", "-3"},
			{"release", "0", "--yes"},
			{"release", "a", "b"},
		} {
			if r := runCLI(t, db, nil, args...); r.code != exitUsage {
				t.Errorf("%v: %+v, want exit 2", args, r)
			}
		}
	})
}
