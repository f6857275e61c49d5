package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/internal/sharedtest"
)

// Rule (G7): every command resolves every operator, function and type in
// pg_catalog or runclaim's own objects, whatever search_path DATABASE_URL
// sets. A schema listed before pg_catalog holds a copy of every operator,
// function and aggregate of pg_catalog and a domain per type name, each
// recording its call (internal/sharedtest.PlantTraps); every command then
// runs with that search_path, and no trap may have fired.
func TestCommandsNoSearchPathHijack(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	traps := sharedtest.PlantTraps(t, db.Pool)
	trapped := map[string]string{envDatabaseURL: sharedtest.TrapDSN(t, db.DSN)}
	file := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(file, []byte("cursor"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want int
		args []string
	}{
		{exitOK, []string{"migrate"}},
		{exitOK, []string{"migrate", "--status", "--json"}},
		{exitOK, []string{"limit", "set", "site", "--running", "2", "--starts", "10", "--per", "1h"}},
		{exitOK, []string{"exec", "--source", "nightly", "--key", "site", "--", "true"}},
		{exitOK, []string{"exec", "--source", "nightly", "--wait", "--", "true"}},
		{exitOK, []string{"exec", "--source", "ticked", "--tick", "2030-01-02T03:04:00Z", "--", "true"}},
		{exitOK, []string{"status"}},
		{exitOK, []string{"status", "--json"}},
		{exitOK, []string{"history", "nightly"}},
		{exitOK, []string{"history", "nightly", "--json"}},
		{exitOK, []string{"limits"}},
		{exitOK, []string{"limits", "--json"}},
		{exitOK, []string{"cooldown", "site", "--for", "1h", "--note", "HTTP 429"}},
		{exitOK, []string{"cooldown", "site", "--end"}},
		{exitOK, []string{"limit", "rm", "site"}},
		{exitOK, []string{"pause", "nightly", "--note", "hold"}},
		{exitOK, []string{"status"}},
		{exitOK, []string{"resume", "nightly"}},
		{exitOK, []string{"trigger", "nightly"}},
		{exitOK, []string{"state", "nightly", "--set-file", file}},
		{exitOK, []string{"state", "nightly"}},
		{exitOK, []string{"state", "nightly", "--clear"}},
		{exitOK, []string{"check", "nightly", "--max-age", "1h"}},
		{exitOK, []string{"release", "--source", "nightly", "--yes"}},
		{exitOK, []string{"prune", "--older-than", "0", "--yes"}},
		{exitOK, []string{"prune", "--keep-last", "1", "--yes"}},
		{exitOK, []string{"migrate"}},
	} {
		r := runVars(t, trapped, nil, c.args...)
		cmd := strings.Join(c.args, " ")
		// release finds nothing to release: the exec runs have finished.
		if r.code != c.want && !(c.args[0] == "release" && r.code == exitError) {
			t.Errorf("runclaim %s: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", cmd, r.code, c.want, r.stdout, r.stderr)
		}
		if calls, names := traps.Fired(t); calls != 0 {
			t.Errorf("runclaim %s: %d trap call(s) through DATABASE_URL's search_path: %s", cmd, calls, strings.Join(names, ", "))
			traps.Reset(t)
		}
	}
}
