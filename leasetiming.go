package runclaim

import (
	"time"
)

// A schedule is the timing of a Claimer's runs. Every duration in it
// follows from the lease and the heartbeat interval, and is computed here
// only, once, when the Claimer is built (as River's leadershipTerm is).
// Claimer.Settings reports its fields, and the docs name those fields
// rather than restate the formulas.
//
// The fields, for a lease L and a heartbeat interval H (L/3 unless an
// option sets it, and under L/2):
//
//   - margin, (L - 2H)/4: how long before a lease ends by the holder's own
//     clock a run without a successful heartbeat is given up as lost. The
//     store's lease ends only as much later as the claim or heartbeat took
//     to reach it, so giving up at the end itself would be too late: work
//     could still be going on when another replica takes the source over.
//     It is a quarter of the slack the heartbeat schedule leaves, positive
//     since H < L/2, so one failed heartbeat still does not lose the run.
//   - attempt, (L - margin - H)/3: the bound on one heartbeat attempt. An
//     attempt that hangs is given up in time for two more before the run
//     is given up.
//   - retry, H/4: the wait after a failed or abandoned attempt.
type schedule struct {
	lease     time.Duration
	heartbeat time.Duration
	margin    time.Duration
	attempt   time.Duration
	retry     time.Duration
}

// newSchedule derives the schedule of a lease and a heartbeat interval; a
// heartbeat interval of 0 means the default, a third of the lease. Both
// are assumed valid, the interval under half the lease (the options and
// applyOptions check them).
func newSchedule(lease, heartbeat time.Duration) schedule {
	if heartbeat == 0 {
		heartbeat = lease / 3
	}
	s := schedule{lease: lease, heartbeat: heartbeat, retry: heartbeat / 4}
	s.margin = (lease - 2*heartbeat) / 4
	s.attempt = (lease - s.margin - heartbeat) / 3
	return s
}

// localEnd is the end of a lease by the holder's own clock, for a claim or
// heartbeat sent at sent.
func (s schedule) localEnd(sent time.Time) time.Time { return sent.Add(s.lease) }

// lostAt is when a run whose lease ends at localEnd, by the holder's own
// clock, is given up as lost if no heartbeat succeeds meanwhile.
func (s schedule) lostAt(localEnd time.Time) time.Time { return localEnd.Add(-s.margin) }
