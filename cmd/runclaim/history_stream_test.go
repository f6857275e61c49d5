package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// heapSampler is a stdout that reads the live heap every sampleEvery
// writes, after a collection, and keeps the largest it saw. It keeps only
// the last bytes written and counts the rest.
type heapSampler struct {
	writes, bytes int
	peak          uint64
	tail          []byte // the last 4 kB written
	lines         int
}

const sampleEvery = 4000

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func (h *heapSampler) Write(p []byte) (int, error) {
	h.writes++
	h.bytes += len(p)
	h.lines += bytes.Count(p, []byte{'\n'})
	h.tail = append(h.tail, p...)
	if len(h.tail) > 8192 {
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-4096:]...)
	}
	if h.writes%sampleEvery == 1 {
		h.peak = max(h.peak, liveHeap())
	}
	return len(p), nil
}

// TestHistoryStreams: history prints a long history as it reads it: with
// 100,000 runs, the live heap while it prints, in a table or as JSON, stays
// within a few MB of what it was before the command, where holding the
// runs would take tens of MB.
func TestHistoryStreams(t *testing.T) {
	const runs = 100_000
	db, _ := setup(t)
	// Runs with a 100-byte error text, one second apart.
	if _, err := db.Pool.Exec(t.Context(), `INSERT INTO public.runclaim_runs
	(source, status, owner, started_at, lease_until, heartbeat_at, finished_at, error)
SELECT 'big', 'failed', 'host-' || (i % 7), t, t + interval '30 s', t, t + interval '1 s', repeat('e', 90) || lpad(i::text, 10, '0')
FROM generate_series(1, $1) AS i, LATERAL (SELECT timestamptz '2026-01-01' + i * interval '1 s') AS x(t)`, runs); err != nil {
		t.Fatal(err)
	}

	// The limit on how much more live heap printing may take. Holding the
	// runs takes far more: RunRecord alone is 168 bytes, without its
	// strings, 16 MB for 100,000 runs.
	const bound = 8 << 20
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(envDatabaseURL, db.DSN)
			args := []string{"history", "big", "--limit", fmt.Sprint(runs)}
			if format == "json" {
				args = append(args, "--json")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a correctness test; slow under -race
			defer cancel()
			out := &heapSampler{}
			var stderr strings.Builder
			before := liveHeap()
			code := run(ctx, args, nil, out, &stderr)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			t.Logf("%s: %d bytes in %d writes; live heap %d kB before, at most %d kB while printing",
				format, out.bytes, out.writes, before>>10, out.peak>>10)
			if out.writes < runs/tableBlock {
				t.Fatalf("only %d writes: nothing was sampled while printing", out.writes)
			}
			if out.peak > before+bound {
				t.Errorf("the live heap grew by %d kB while printing %d runs, more than %d kB: the runs are held in memory",
					(out.peak-before)>>10, runs, bound>>10)
			}
			// And everything was printed: the oldest run comes last.
			tail := string(out.tail)
			switch format {
			case "table":
				if out.lines != runs+1 || !strings.Contains(tail, "\n1       big ") {
					t.Errorf("%d lines, ending %q; want a header and %d rows, the oldest last", out.lines, tail[max(0, len(tail)-200):], runs)
				}
			case "json":
				if i := strings.LastIndex(tail, "{"); i < 0 || !strings.HasSuffix(tail, "}\n]\n") {
					t.Errorf("JSON ends %q", tail)
				} else {
					var last runJSON
					if err := json.Unmarshal([]byte(strings.TrimSuffix(tail[i:], "\n]\n")), &last); err != nil || !strings.HasSuffix(last.Error, "0000000001") {
						t.Errorf("last run %+v (%v), want the oldest", last, err)
					}
				}
			}
		})
	}
}
