package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
)

// writingCommands are the commands that take --synchronous-commit, with
// arguments that make each of them write.
var writingCommands = map[string][]string{
	"exec":    {"--source", "sc", "--", "true"},
	"release": {"sc", "--yes"},
	"prune":   {"--older-than", "0s", "--yes"},
	"pause":   {"sc"},
	"resume":  {"sc"},
	"trigger": {"sc"},
}

// TestSynchronousCommitUsage: a bad --synchronous-commit or
// $RUNCLAIM_SYNCHRONOUS_COMMIT is a usage error of every command that
// writes, before anything connects, and says what the levels are; the flag
// is refused by the commands whose writes it would not reach, and the
// variable is left alone by them; each command's help says which.
func TestSynchronousCommitUsage(t *testing.T) {
	for name, args := range writingCommands {
		for _, level := range []string{"fast", "ON", ""} {
			r := runCLI(t, nil, nil, slices.Concat([]string{name, "--synchronous-commit", level}, args)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "--synchronous-commit") ||
				!strings.Contains(r.stderr, "remote_apply, on, remote_write, local, off") || strings.Contains(r.stderr, "With") {
				t.Errorf("%s --synchronous-commit %q: %+v; want a usage error naming the flag and the levels", name, level, r)
			}
		}
		clearEnv(t)
		t.Setenv(envSynchronousCommit, "fast")
		r := runInEnv(t, nil, append([]string{name}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, envSynchronousCommit+"=fast") {
			t.Errorf("%s with %s=fast: %+v; want a usage error naming the variable", name, envSynchronousCommit, r)
		}
		r = runCLI(t, nil, nil, name, "--help")
		for _, want := range []string{"--synchronous-commit", envSynchronousCommit, "remote_apply"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s --help does not mention %s:\n%s", name, want, r.stdout)
			}
		}
	}
	for _, args := range [][]string{
		{"status", "--synchronous-commit", "on"},
		{"history", "sc", "--synchronous-commit", "on"},
		{"check", "sc", "--max-age", "1h", "--synchronous-commit", "on"},
		{"migrate", "--synchronous-commit", "on"},
		{"--synchronous-commit", "on", "status"},
	} {
		r := runCLI(t, nil, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--synchronous-commit does not apply") {
			t.Errorf("%v: %+v; want a usage error saying the flag does not apply", args, r)
		}
	}
	r := runCLI(t, nil, nil, "migrate", "--synchronous-commit", "on")
	if !strings.Contains(r.stderr, "DATABASE_URL") {
		t.Errorf("migrate --synchronous-commit: %q does not say how to set it for migrate", r.stderr)
	}
	// The variable, shared by every command of a crontab, is for the
	// commands that write; the others leave it alone.
	clearEnv(t)
	t.Setenv(envSynchronousCommit, "fast")
	if r := runInEnv(t, nil, "migrate", "--sql"); r.code != exitOK {
		t.Errorf("migrate --sql with %s=fast: %+v; want it ignored", envSynchronousCommit, r)
	}
	for _, name := range []string{"status", "history", "check"} {
		r := runCLI(t, nil, nil, name, "--help")
		if strings.Contains(r.stdout, "--synchronous-commit") {
			t.Errorf("%s --help lists --synchronous-commit, which it refuses:\n%s", name, r.stdout)
		}
	}
	r = runCLI(t, nil, nil, "migrate", "--help")
	for _, want := range []string{"synchronous_commit", "ALTER ROLE", "options=-c"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate --help does not mention %s:\n%s", want, r.stdout)
		}
	}
}

// TestSynchronousCommit: every write of a command given
// --synchronous-commit (or $RUNCLAIM_SYNCHRONOUS_COMMIT, which the flag
// overrides) commits with that level, as triggers on the runs table and
// the control table see it; without either, with the server's default. A
// bad level changes nothing.
func TestSynchronousCommit(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	ctx := t.Context()
	control := strings.TrimSuffix(store.Table(), `"`) + `_control"`
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE seen (n bigserial, tab text, op text, level text);
CREATE FUNCTION see() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.seen (tab, op, level) VALUES (TG_TABLE_NAME, TG_OP, pg_catalog.current_setting('synchronous_commit'));
	RETURN NULL;
END $$;
CREATE TRIGGER see AFTER INSERT OR UPDATE OR DELETE ON `+store.Table()+` FOR EACH ROW EXECUTE FUNCTION public.see();
CREATE TRIGGER see AFTER INSERT OR UPDATE OR DELETE ON `+control+` FOR EACH ROW EXECUTE FUNCTION public.see()`); err != nil {
		t.Fatal(err)
	}
	var def string
	if err := db.Pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	const level = "remote_write"
	if def == level || def == "off" {
		t.Fatalf("the server's default synchronous_commit is %q", def)
	}
	// seen returns what the triggers saw since the last call, one
	// "table op level" a row written.
	seen := func(t *testing.T) []string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `DELETE FROM seen RETURNING tab || ' ' || op || ' ' || level`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(t *testing.T, what string, want string) {
		t.Helper()
		got := seen(t)
		if len(got) == 0 {
			t.Errorf("%s: the triggers saw no write", what)
		}
		for _, g := range got {
			if !strings.HasSuffix(g, " "+want) {
				t.Errorf("%s: a write ran with %q, want synchronous_commit %s", what, g, want)
			}
		}
	}
	// Each writing command, so that each writes: exec claims and finishes
	// (heartbeats too: a lease of 3s beats each second), and leaves a run
	// for prune; a run held meanwhile is for release.
	sequence := func(t *testing.T, dsn, env string, flags []string, want string) {
		t.Helper()
		cmd := func(args ...string) {
			t.Helper()
			args = slices.Concat(args[:1], flags, args[1:])
			if r := runVars(t, map[string]string{envDatabaseURL: dsn, envSynchronousCommit: env}, nil, args...); r.code != exitOK {
				t.Fatalf("runclaim %s with %s=%q: %+v, want exit 0", strings.Join(args, " "), envSynchronousCommit, env, r)
			}
		}
		cmd("exec", "--source", "sc", "--lease", "3s", "--", "sleep", "1.5")
		check(t, "exec", want)
		hold(t, store, "sc", "other")
		seen(t)
		cmd("release", "sc", "--yes")
		check(t, "release", want)
		cmd("prune", "--older-than", "0s", "--yes")
		check(t, "prune", want)
		cmd("pause", "sc", "--note", "n")
		check(t, "pause", want)
		cmd("resume", "sc")
		check(t, "resume", want)
		cmd("trigger", "sc")
		check(t, "trigger", want)
		// The trigger's row goes with a claim; this one is the test's.
		if err := hold(t, store, "sc", "other").Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		seen(t)
	}
	t.Run("flag", func(t *testing.T) {
		sequence(t, db.DSN, "", []string{"--synchronous-commit", level}, level)
	})
	t.Run("variable", func(t *testing.T) {
		sequence(t, db.DSN, level, nil, level)
	})
	t.Run("flag over variable", func(t *testing.T) {
		sequence(t, db.DSN, "off", []string{"--synchronous-commit", level}, level)
	})
	t.Run("neither", func(t *testing.T) {
		sequence(t, db.DSN, "", nil, def)
	})
	// The alternative that 'runclaim --help' and docs/cli.md give: the
	// options startup parameter in DATABASE_URL sets the sessions' default.
	t.Run("options in DATABASE_URL", func(t *testing.T) {
		var dsn string
		switch {
		case strings.Contains(db.DSN, "://") && strings.Contains(db.DSN, "?"):
			dsn = db.DSN + "&options=-c%20synchronous_commit%3D" + level
		case strings.Contains(db.DSN, "://"):
			dsn = db.DSN + "?options=-c%20synchronous_commit%3D" + level
		default:
			dsn = db.DSN + " options='-c synchronous_commit=" + level + "'"
		}
		sequence(t, dsn, "", nil, level)
	})
	// pgx sends a key it does not know as a startup parameter too.
	t.Run("key in DATABASE_URL", func(t *testing.T) {
		var dsn string
		switch {
		case strings.Contains(db.DSN, "://") && strings.Contains(db.DSN, "?"):
			dsn = db.DSN + "&synchronous_commit=" + level
		case strings.Contains(db.DSN, "://"):
			dsn = db.DSN + "?synchronous_commit=" + level
		default:
			dsn = db.DSN + " synchronous_commit=" + level
		}
		sequence(t, dsn, "", nil, level)
	})
	t.Run("bad level changes nothing", func(t *testing.T) {
		run := hold(t, store, "sc", "other")
		seen(t)
		r := runCLI(t, db, nil, "release", "sc", "--yes", "--synchronous-commit", "fast")
		if r.code != exitUsage {
			t.Errorf("release with a bad level: %+v, want exit %d", r, exitUsage)
		}
		if got := seen(t); len(got) != 0 {
			t.Errorf("release with a bad level wrote: %q", got)
		}
		if runs := history(t, store, "sc"); len(runs) == 0 || runs[0].ID != run.ID || runs[0].Status != runclaim.StatusRunning {
			t.Errorf("release with a bad level: history %+v, want run %d still running", runs, run.ID)
		}
	})
}
