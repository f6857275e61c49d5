package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
)

// readingWriter is a stdout that, at the first write, asks the database
// whether a query of the command (its connections are named app) is still
// being executed: whether the command printed before it had read all it
// prints.
type readingWriter struct {
	t     *testing.T
	db    *pgtest.DB
	app   string
	first bool // the first write has been seen
	busy  int  // the command's queries in progress at the first write
	bytes int
	lines int
	tail  []byte // the last 4 kB written
}

func (w *readingWriter) Write(p []byte) (int, error) {
	if !w.first {
		w.first = true
		if err := w.db.Pool.QueryRow(w.t.Context(), `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND application_name = $1 AND state = 'active'`, w.app).Scan(&w.busy); err != nil {
			w.t.Errorf("pg_stat_activity: %v", err)
		}
	}
	w.bytes += len(p)
	w.lines += bytes.Count(p, []byte{'\n'})
	w.tail = append(w.tail, p...)
	if len(w.tail) > 8192 {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-4096:]...)
	}
	return len(p), nil
}

// TestStatusStreams: status prints the running runs as it reads them: when
// it first writes to stdout, in a table or as JSON, the database is still
// executing the query that reads them. The runs' rows, 30 MB of them, are
// far more than the buffers between the database and the command hold, so
// the database has not sent them all when the first block (a table's 1000
// rows) or the first run (JSON) is printed.
func TestStatusStreams(t *testing.T) {
	const runs = 30_000
	db, _ := setup(t)
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO public.runclaim_runs (source, status, owner, started_at, lease_until, heartbeat_at)
SELECT 'src-' || lpad(i::text, 6, '0'), 'running', repeat('o', 1000), now(), now() + interval '1 hour', now()
FROM generate_series(1, $1) AS i`, runs); err != nil {
		t.Fatal(err)
	}
	const app = "status-stream"
	dsn := db.DSN + "&application_name=" + app
	if !strings.Contains(db.DSN, "?") {
		dsn = db.DSN + "?application_name=" + app
	}
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(envDatabaseURL, dsn)
			args := []string{"status"}
			if format == "json" {
				args = append(args, "--json")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a correctness test; slow under -race
			defer cancel()
			out := &readingWriter{t: t, db: db, app: app}
			var stderr strings.Builder
			if code := run(ctx, args, nil, out, &stderr); code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if out.busy == 0 {
				t.Errorf("status printed nothing until it had read all %d runs: the runs are held in memory", runs)
			}
			// And everything was printed: the last source comes last.
			tail := string(out.tail)
			switch format {
			case "table":
				if out.lines != runs+1 || !strings.Contains(tail, "\nsrc-030000 ") {
					t.Errorf("%d lines, ending %q; want a header and %d rows, src-030000 last", out.lines, tail[max(0, len(tail)-200):], runs)
				}
			case "json":
				if !strings.Contains(tail, `"source": "src-030000"`) || !strings.HasSuffix(tail, "\n  ],\n  \"paused\": [],\n  \"triggered\": [],\n  \"cooling\": [],\n  \"cooling_truncated\": false\n}\n") {
					t.Errorf("JSON ends %q", tail[max(0, len(tail)-400):])
				}
			}
		})
	}
}

// TestStatusJSONDocument: status --json, printed a run at a time, is the
// same document, byte for byte, as the whole object written at once by
// writeJSON, with no run, one, or several, a tick, and strings that
// jsonEscape escapes.
func TestStatusJSONDocument(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	runs := []runclaim.RunRecord{
		{RunInfo: runclaim.RunInfo{ID: 7, Source: "alpha", Owner: "host-a", StartedAt: now.Add(-time.Minute), LeaseUntil: now.Add(time.Hour)},
			Status: runclaim.StatusRunning, HeartbeatAt: now.Add(-time.Second)},
		{RunInfo: runclaim.RunInfo{ID: 9, Source: "beta\u202e", Owner: "host\x7f<b>", StartedAt: now.Add(-time.Hour), LeaseUntil: now.Add(-time.Minute), Tick: now.Add(-time.Hour)},
			Status: runclaim.StatusRunning, HeartbeatAt: now.Add(-2 * time.Minute)},
	}
	controls := []runclaim.SourceControl{{Source: "gamma", Paused: true, PausedAt: now.Add(-time.Hour), Note: "n\u200b", TriggeredAt: now}}
	cools := []runclaim.KeyState{{Key: "site:a", CoolingUntil: now.Add(time.Hour), Note: "429"}}
	for n := range len(runs) + 1 {
		// The document as it was written at once.
		type doc struct {
			Running   []statusJSON   `json:"running"`
			Paused    []controlJSON  `json:"paused"`
			Triggered []controlJSON  `json:"triggered"`
			Cooling   []cooldownJSON `json:"cooling"`
			Truncated bool           `json:"cooling_truncated"`
		}
		want := doc{Running: []statusJSON{}, Triggered: []controlJSON{}, Truncated: n == len(runs)}
		for _, r := range runs[:n] {
			left := r.LeaseUntil.Sub(now)
			want.Running = append(want.Running, statusJSON{r.Source, r.ID, r.Owner, string(r.Status), jsonTime(r.StartedAt), jsonTime(r.LeaseUntil),
				jsonTime(r.HeartbeatAt), jsonTime(r.Tick), jsonTime(now), seconds(now.Sub(r.StartedAt)), seconds(now.Sub(r.HeartbeatAt)), seconds(left), left <= 0})
		}
		k := controls[0]
		j := controlJSON{k.Source, "paused", jsonTime(k.PausedAt), jsonTime(k.PausedUntil), k.Note, jsonTime(k.TriggeredAt), jsonTime(now)}
		want.Paused = append(want.Paused, j)
		j.Status = "triggered"
		want.Triggered = append(want.Triggered, j)
		want.Cooling = []cooldownJSON{{"site:a", "cooling", jsonTime(cools[0].CoolingUntil), "429", jsonTime(now)}}
		var wantOut bytes.Buffer
		if err := writeJSON(&wantOut, want); err != nil {
			t.Fatal(err)
		}

		var out bytes.Buffer
		c := &cli{stdout: &out, json: true}
		list := c.newStatusList("")
		for _, r := range runs[:n] {
			if err := list.add(r, now); err != nil {
				t.Fatal(err)
			}
		}
		if err := list.close(); err != nil {
			t.Fatal(err)
		}
		if err := c.writeStatusRestJSON(controls, now, cools, now, want.Truncated); err != nil {
			t.Fatal(err)
		}
		if out.String() != wantOut.String() {
			t.Errorf("%d runs: printed\n%s\nwant\n%s", n, out.String(), wantOut.String())
		}
	}
}
