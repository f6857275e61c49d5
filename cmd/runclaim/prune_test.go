package main

import (
	"strings"
	"testing"
	"time"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	db, store := setup(t)
	for range 3 {
		mustRun(t, db, 0, "exec", "--source", "a", "--", "true")
	}
	mustRun(t, db, 1, "exec", "--source", "b", "--", "false")
	mustRun(t, db, 0, "exec", "--source", "c", "--", "true")
	hold(t, store, "c", "host") // running, and c's newest

	// A month: everything is younger.
	r := mustRun(t, db, exitOK, "prune", "--older-than", "30d")
	if want := "deleted 0 runs that finished more than 30d ago"; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}

	// Everything finished is old enough, but each source keeps its newest
	// run and running runs stay: a's two older runs and c's finished one go.
	r = mustRun(t, db, exitOK, "prune", "--older-than", "0s", "--json", "--yes")
	obj := decodeObject(t, r.stdout, "deleted", "older_than_seconds", "keep_last")
	if num(t, obj["deleted"]) != 3 || num(t, obj["older_than_seconds"]) != 0 {
		t.Errorf("JSON %v, want 3 deleted", obj)
	}
	for source, want := range map[string]int{"a": 1, "b": 1, "c": 1} {
		if got := history(t, store, source); len(got) != want {
			t.Errorf("%s has %d runs left, want %d", source, len(got), want)
		}
	}
	if got := history(t, store, "c"); got[0].Status != "running" {
		t.Errorf("c's run left is %s, want the running one", got[0].Status)
	}
	if r := mustRun(t, db, exitOK, "prune", "--older-than=0s", "--json", "--yes"); num(t, decodeObject(t, r.stdout, "deleted", "older_than_seconds", "keep_last")["deleted"]) != 0 {
		t.Errorf("second prune: %s", r.stdout)
	}

	// --keep-last: five runs of d; the last two stay, whatever their age.
	for range 5 {
		mustRun(t, db, 0, "exec", "--source", "d", "--", "true")
	}
	r = mustRun(t, db, exitOK, "prune", "--keep-last", "2")
	if want := "deleted 3 runs beyond the last 2 of their source (the last 2 runs of each source are kept, and running runs)"; !strings.Contains(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if got := history(t, store, "d"); len(got) != 2 {
		t.Errorf("d has %d runs left, want 2", len(got))
	}
	// With an age too: nothing is that old.
	r = mustRun(t, db, exitOK, "prune", "--keep-last", "1", "--older-than", "30d", "--json")
	obj = decodeObject(t, r.stdout, "deleted", "older_than_seconds", "keep_last")
	if num(t, obj["deleted"]) != 0 || num(t, obj["keep_last"]) != 1 || num(t, obj["older_than_seconds"]) != 30*24*3600 {
		t.Errorf("JSON %v, want 0 deleted, keep_last 1, 30 days", obj)
	}

	for _, args := range [][]string{
		{"prune"},
		{"prune", "--keep-last", "0"},
		{"prune", "--keep-last", "-1"},
		{"prune", "--keep-last", "100001"},
		{"prune", "--keep-last", "x"},
		{"prune", "--older-than", "1h", "--keep-last", "-1"},
		// Only each source's newest run is sure to stay, and there is no
		// terminal to confirm: refused.
		{"prune", "--keep-last", "1"},
		{"prune", "--older-than", "59m", "--keep-last", "1"},
		{"prune", "--older-than", "soon"},
		{"prune", "--older-than", "-1h"},
		{"prune", "--older-than", "NaNd"},
		{"prune", "--older-than", "Infd"},
		{"prune", "--older-than", "1h", "extra"},
	} {
		if r := runCLI(t, db, nil, args...); r.code != exitUsage {
			t.Errorf("%v: %+v, want exit 2", args, r)
		}
	}
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"720h":    720 * time.Hour,
		"30d":     30 * 24 * time.Hour,
		"1d12h":   36 * time.Hour,
		"1.5d":    36 * time.Hour,
		"0":       0,
		"0s":      0,
		"0d":      0,
		"90m":     90 * time.Minute,
		"2d30m":   48*time.Hour + 30*time.Minute,
		"1h30m0s": 90 * time.Minute,
	} {
		got, err := parseAge(in)
		if err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "1d-1h", "x", "30days", "1e3d", "+1d", "1dd", "-5m",
		"NaNd", "nand", "Infd", "infd", "infinityd", "NaNd1h", ".d", "1..5d", "٣d", "0x10d", "1_0d", "99999999999d"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}
