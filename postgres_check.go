package runclaim

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A SourceState is what the runs table says about one source at one
// moment, as Check and SourceStates read it. Its times are the database's.
type SourceState struct {
	Source    string    // the source's name
	CheckedAt time.Time // the database's time of the read: ages are measured from it
	// Latest is the source's newest run: the running one if Latest.Status
	// is StatusRunning. nil if the source never ran.
	Latest *RunRecord
	// LastFinished is the newest run that has ended, whatever its outcome;
	// nil if none has.
	LastFinished *RunRecord
	// LastSuccess is the newest succeeded run; nil if the source never
	// succeeded, or if SuccessUnread is set.
	LastSuccess *RunRecord
	// SuccessUnread is set when the source has CheckScanLimit runs or more
	// and none of the newest CheckScanLimit succeeded: any older runs were
	// not read.
	SuccessUnread bool
}

// Running returns the source's running run, or nil.
func (s SourceState) Running() *RunRecord {
	if s.Latest != nil && s.Latest.Status == StatusRunning {
		return s.Latest
	}
	return nil
}

// Failing reports whether the source's newest finished run did not
// succeed: it failed, its lease ran out (expired), or an operator released it.
func (s SourceState) Failing() bool {
	return s.LastFinished != nil && s.LastFinished.Status != StatusSucceeded
}

// SuccessAge returns how long before CheckedAt the newest succeeded run
// started, and false if there is none.
func (s SourceState) SuccessAge() (time.Duration, bool) {
	if s.LastSuccess == nil {
		return 0, false
	}
	return s.CheckedAt.Sub(s.LastSuccess.StartedAt), true
}

// Overdue reports whether the source has no succeeded run that started
// within maxAge before CheckedAt.
func (s SourceState) Overdue(maxAge time.Duration) bool {
	age, ok := s.SuccessAge()
	return !ok || age > maxAge
}

// Health is Check's answer: whether a source's newest succeeded run started
// within MaxAge, and what the table says about it.
type Health struct {
	SourceState
	MaxAge  time.Duration // the age asked for
	Healthy bool          // a succeeded run started within MaxAge before CheckedAt
}

// String says in one line why the source is healthy or not: its last
// success and that success's age, and whether a run is running or the
// source is failing.
func (h Health) String() string {
	var b strings.Builder
	if h.Healthy {
		b.WriteString("ok: ")
	} else {
		b.WriteString("overdue: ")
	}
	fmt.Fprintf(&b, "%s: ", quoteForError(h.Source))
	switch age, ok := h.SuccessAge(); {
	case ok:
		fmt.Fprintf(&b, "last success %s (run %d), %s ago", h.LastSuccess.StartedAt.UTC().Format(time.RFC3339), h.LastSuccess.ID, roundAge(age))
		if h.Healthy {
			fmt.Fprintf(&b, ", within %s", h.MaxAge)
		} else {
			fmt.Fprintf(&b, ", more than %s", h.MaxAge)
		}
	case h.SuccessUnread:
		fmt.Fprintf(&b, "no success in its latest %d runs", CheckScanLimit)
	case h.Latest == nil:
		b.WriteString("never ran")
	default:
		b.WriteString("never succeeded")
	}
	if r := h.Running(); r != nil {
		fmt.Fprintf(&b, "; run %d running for %s", r.ID, roundAge(h.CheckedAt.Sub(r.StartedAt)))
		if left := r.LeaseUntil.Sub(h.CheckedAt); left <= 0 {
			fmt.Fprintf(&b, " (its lease ended %s ago)", roundAge(-left))
		}
	}
	// A pause would be reported here, once the store records pauses.
	if h.Failing() {
		fmt.Fprintf(&b, "; failing: run %d %s", h.LastFinished.ID, h.LastFinished.Status)
		if e := h.LastFinished.Error; e != "" {
			if len(e) > 200 {
				e = e[:200] + "…"
			}
			fmt.Fprintf(&b, ": %s", strings.ToValidUTF8(e, "\uFFFD"))
		}
	}
	return b.String()
}

// roundAge rounds an age for people: to the second, or to the millisecond
// under a second.
func roundAge(d time.Duration) time.Duration {
	if d < time.Second && d > -time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

var (
	//go:embed sql/source_state.sql
	sourceStateSQL string
	//go:embed sql/source_state_one.sql
	sourceStateOneSQL string
	//go:embed sql/source_state_all.sql
	sourceStateAllSQL string
)

// Check tells whether source's newest succeeded run started within maxAge,
// by the database's clock: the answer of a dead man's switch, for a
// service's health endpoint or a monitoring probe ('runclaim check' gives
// the same). It sends one query, which reads at most CheckScanLimit + 4 of
// the source's runs through the history index, however long the history.
//
// A source that never ran, never succeeded, or did not succeed in its
// CheckScanLimit newest runs is not healthy. An error (an invalid source, a
// maxAge that is not positive, an unreachable database, a missing table)
// means Check could not tell.
func (s *PostgresStore) Check(ctx context.Context, source string, maxAge time.Duration) (Health, error) {
	if err := checkContext(ctx); err != nil {
		return Health{}, err
	}
	if err := ValidateSource(source); err != nil {
		return Health{}, err
	}
	if maxAge <= 0 {
		return Health{}, fmt.Errorf("runclaim: check: maxAge must be positive, got %v", maxAge)
	}
	states, err := s.sourceStates(ctx, s.sql.sourceStateOne, source)
	if err != nil {
		return Health{}, s.wrap(ctx, "check "+quoteForError(source), err)
	}
	st := SourceState{Source: source}
	if len(states) == 1 {
		st = states[0]
	}
	return Health{SourceState: st, MaxAge: maxAge, Healthy: !st.Overdue(maxAge)}, nil
}

// SourceStates returns the state of every source in the runs table,
// ordered by source, read in one query at the same database time: for a
// scrape-time collector, or a list of the overdue sources. The query
// visits each source with one probe of the history index and then reads at
// most CheckScanLimit + 4 of its runs, so its cost grows with the number
// of sources, not with the history. With more than MaxSourceStates sources
// it returns an error.
func (s *PostgresStore) SourceStates(ctx context.Context) ([]SourceState, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	states, err := s.sourceStates(ctx, s.sql.sourceStateAll, int64(MaxSourceStates+1))
	if err != nil {
		return nil, s.wrap(ctx, "source states", err)
	}
	if len(states) > MaxSourceStates {
		return nil, fmt.Errorf("runclaim: source states: %w: more than %d sources", errTooManySources, MaxSourceStates)
	}
	return states, nil
}

var errTooManySources = errors.New("too many sources")

// sourceStates runs q, a form of sourceStateSQL with first as $1, and
// gathers its rows by source.
func (s *PostgresStore) sourceStates(ctx context.Context, q string, first any) ([]SourceState, error) {
	rows, err := s.db.Query(ctx, q, first, int64(CheckScanLimit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SourceState
	for rows.Next() {
		var (
			now      time.Time
			source   string
			kind     *string
			id       *int64
			owner    *string
			started  *time.Time
			lease    *time.Time
			status   *string
			hb       *time.Time
			finished *time.Time
			errText  *string
		)
		if err := rows.Scan(&now, &source, &kind, &id, &owner, &started, &lease, &status, &hb, &finished, &errText); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Source != source {
			out = append(out, SourceState{Source: source, CheckedAt: now})
		}
		st := &out[len(out)-1]
		if kind == nil { // a source without runs: only Check asks for one
			continue
		}
		r := &RunRecord{
			RunInfo: RunInfo{ID: *id, Source: source, Owner: *owner, StartedAt: *started, LeaseUntil: *lease},
			Status:  Status(*status), HeartbeatAt: *hb,
		}
		if finished != nil {
			r.FinishedAt = *finished
		}
		if errText != nil {
			r.Error = *errText
		}
		switch *kind {
		case "latest":
			st.Latest = r
		case "finished":
			st.LastFinished = r
		case "succeeded":
			st.LastSuccess = r
		case "unread":
			st.SuccessUnread = true
		}
	}
	return out, rows.Err()
}
