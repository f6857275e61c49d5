package runclaim

import (
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
	// MaxAge and Healthy are Check's answer: the age asked for, and
	// whether a succeeded run started within it before CheckedAt. Zero
	// from SourceStates, which judges nothing.
	MaxAge  time.Duration
	Healthy bool
}

// Running returns the source's running run, or nil.
func (s SourceState) Running() *RunRecord {
	if s.Latest != nil && s.Latest.Status == StatusRunning {
		return s.Latest
	}
	return nil
}

// Failing reports whether the source's newest finished run did not
// succeed: it failed, its lease ran out (expired), or an operator released
// it. A run replaced (see Replace) is not a failure: another took over.
func (s SourceState) Failing() bool {
	return s.LastFinished != nil && s.LastFinished.Status != StatusSucceeded && s.LastFinished.Status != StatusReplaced
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

// String says in one line why the source is healthy or not: its last
// success and that success's age, and whether a run is running or the
// source is failing.
func (h SourceState) String() string {
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

var errTooManySources = errors.New("too many sources")

// RunRecord is one row of a source's run history, as the operator commands
// of PostgresStore report it.
type RunRecord struct {
	RunInfo
	Status      Status    // running, or how the run ended
	HeartbeatAt time.Time // the last heartbeat, or the start
	FinishedAt  time.Time // zero while running
	Error       string    // the failure's text, if any
}
