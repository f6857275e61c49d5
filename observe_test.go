package runclaim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/runclaim/runclaim"
)

// observed records what a Claimer reports through its hooks and its
// logger.
type observed struct {
	mu      sync.Mutex // protects the fields below
	claimed []runclaim.Event
	skipped []runclaim.Event
	failed  []runclaim.Event
	log     bytes.Buffer // JSON lines
}

func (o *observed) options() []runclaim.Option {
	lock := func(f func()) { o.mu.Lock(); defer o.mu.Unlock(); f() }
	return []runclaim.Option{
		runclaim.WithHooks(runclaim.Hooks{
			Claimed:     func(e runclaim.Event) { lock(func() { o.claimed = append(o.claimed, e) }) },
			Skipped:     func(e runclaim.Event) { lock(func() { o.skipped = append(o.skipped, e) }) },
			ClaimFailed: func(e runclaim.Event) { lock(func() { o.failed = append(o.failed, e) }) },
		}),
		runclaim.WithLogger(slog.New(slog.NewJSONHandler(lockedWriter{o}, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}
}

type lockedWriter struct{ o *observed }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return w.o.log.Write(p)
}

// take returns what was recorded and forgets it.
func (o *observed) take(t *testing.T) (claimed, skipped, failed int, events []runclaim.Event, logs []map[string]any) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(o.log.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		logs = append(logs, m)
	}
	claimed, skipped, failed, events = len(o.claimed), len(o.skipped), len(o.failed), o.failed
	o.claimed, o.skipped, o.failed = nil, nil, nil
	o.log.Reset()
	return claimed, skipped, failed, events, logs
}

// TestClaimFailedHook: a claim that fails with an error that is not a skip
// (the store's, the caller's ended context, invalid input) calls
// ClaimFailed once with the source, the very error Claim returned and the
// time it took, and logs "runclaim: claim failed" at Error, or at Warn when
// the caller's context had ended; a win and a skip do not call it.
func TestClaimFailedHook(t *testing.T) {
	ctx := t.Context()
	errDown := errors.New("connection refused")
	spy := newSpyStore(runclaim.NewMemoryStore())
	o := &observed{}
	c := doClaimer(t, spy, o.options()...)
	holder := doClaimer(t, spy, runclaim.WithOwner("holder"))

	check := func(what string, err error, wantSource string, wantLevel string, wantDuration bool) {
		t.Helper()
		claimed, skipped, failed, events, logs := o.take(t)
		if claimed != 0 || skipped != 0 || failed != 1 {
			t.Fatalf("%s: hooks Claimed %d, Skipped %d, ClaimFailed %d times; want ClaimFailed once", what, claimed, skipped, failed)
		}
		e := events[0]
		if e.Source != wantSource || e.Err != err || (e.Duration > 0) != wantDuration || e.Duration < 0 {
			t.Errorf("%s: event %+v; want source %q, the error Claim returned (%v), a duration: %v", what, e, wantSource, err, wantDuration)
		}
		if len(logs) != 1 || logs[0]["msg"] != "runclaim: claim failed" || logs[0]["level"] != wantLevel ||
			logs[0]["error"] != err.Error() || logs[0]["source"] != strings.ToValidUTF8(wantSource, "\uFFFD") {
			t.Errorf("%s: logged %v; want one %s line \"runclaim: claim failed\" with the source and the error", what, logs, wantLevel)
		}
	}

	// The store fails.
	spy.setClaim(func(context.Context, runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		return runclaim.RunInfo{}, errDown
	})
	_, err := c.Claim(ctx, "src")
	if !errors.Is(err, errDown) {
		t.Fatalf("Claim: %v", err)
	}
	check("store error", err, "src", "ERROR", true)
	err = c.Do(ctx, "src", func(context.Context, *runclaim.Run) error { t.Error("fn ran"); return nil })
	check("store error under Do", err, "src", "ERROR", true)

	// The caller's context ended while the store worked.
	cctx, cancel := context.WithCancel(ctx)
	spy.setClaim(func(ctx context.Context, _ runclaim.ClaimRequest) (runclaim.RunInfo, error) {
		cancel()
		return runclaim.RunInfo{}, ctx.Err()
	})
	_, err = c.Claim(cctx, "src")
	check("cancelled", err, "src", "WARN", true)
	spy.setClaim(nil)

	// Invalid input: refused before the store, reported all the same.
	_, err = c.Claim(ctx, "a\x00b")
	check("invalid source", err, "a\x00b", "ERROR", false)
	huge := strings.Repeat("\xff", 10*runclaim.MaxSourceLen)
	_, err = c.Claim(ctx, huge)
	_, _, _, events, logs := o.take(t)
	if len(events) != 1 || events[0].Source != huge || !errors.Is(err, runclaim.ErrInvalidSource) {
		t.Errorf("huge source: events %d, %v", len(events), err)
	}
	if len(logs) != 1 || len(logs[0]["source"].(string)) > 4*runclaim.MaxSourceLen {
		t.Errorf("huge source: the log line holds %d bytes of source", len(logs[0]["source"].(string)))
	}
	var nilCtx context.Context
	_, err = c.Claim(nilCtx, "src")
	check("nil context", err, "src", "ERROR", false)

	// A win and a skip are not failures.
	run, err := holder.Claim(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "held"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatalf("Claim of a held source: %v", err)
	}
	if claimed, skipped, failed, _, _ := o.take(t); claimed != 0 || skipped != 1 || failed != 0 {
		t.Errorf("a skip: Claimed %d, Skipped %d, ClaimFailed %d; want Skipped once", claimed, skipped, failed)
	}
	if err := run.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if claimed, skipped, failed, _, _ := o.take(t); claimed != 1 || skipped != 0 || failed != 0 {
		t.Errorf("a win: Claimed %d, Skipped %d, ClaimFailed %d; want Claimed once", claimed, skipped, failed)
	}
}

// TestSkipLogCostsNothingWhenDropped: a skip logged at Debug by a logger
// whose level drops Debug costs no more allocations than a skip with no
// logger at all: the skip's text is not formatted for a record no one
// keeps.
func TestSkipLogCostsNothingWhenDropped(t *testing.T) {
	store := runclaim.NewMemoryStore()
	holder, err := runclaim.New(store, runclaim.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Claim(t.Context(), "held"); err != nil {
		t.Fatal(err)
	}
	allocs := func(opts ...runclaim.Option) float64 {
		c, err := runclaim.New(store, append([]runclaim.Option{runclaim.WithOwner("loser")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(200, func() {
			if _, err := c.Claim(context.Background(), "held"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
				t.Fatalf("claim of a held source: %v", err)
			}
		})
	}
	info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	none, dropped := allocs(), allocs(runclaim.WithLogger(info))
	if dropped > none {
		t.Errorf("a skip costs %v allocations with a logger that drops Debug, %v with none", dropped, none)
	}
	// And a logger that keeps Debug does get the skip's text.
	var buf bytes.Buffer
	debug := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := runclaim.New(store, runclaim.WithOwner("loser"), runclaim.WithLogger(debug))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(t.Context(), "held"); !errors.Is(err, runclaim.ErrAlreadyRunning) {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `msg="runclaim: skipped"`) || !strings.Contains(buf.String(), "already running as run") {
		t.Errorf("a Debug logger got %q, want the skip and its reason", buf.String())
	}
}
