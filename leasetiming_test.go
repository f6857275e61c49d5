package runclaim

import (
	"strings"
	"testing"
	"time"
)

// TestSchedule checks the schedule's arithmetic: each row is a lease and a
// heartbeat interval (0 for the default) and every duration derived from
// them, worked out by hand. The default row is docs/lifecycle.md's table.
func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		lease, heartbeat         time.Duration
		wantHeartbeat, wantRetry time.Duration
		wantMargin, wantAttempt  time.Duration
	}{
		// (30 - 20)/4 = 2.5; (30 - 2.5 - 10)/3 = 5.8333…; 10/4 = 2.5.
		{"default", DefaultLease, 0, 10 * time.Second, 2500 * time.Millisecond, 2500 * time.Millisecond, 5833333333},
		// (60 - 10)/4 = 12.5; (60 - 12.5 - 5)/3 = 14.1666…; 5/4 = 1.25.
		{"frequent heartbeats", time.Minute, 5 * time.Second, 5 * time.Second, 1250 * time.Millisecond, 12500 * time.Millisecond, 14166666666},
		// 9/3 = 3; (9 - 6)/4 = 0.75; (9 - 0.75 - 3)/3 = 1.75; 3/4 = 0.75.
		{"lease not a multiple of three", 9 * time.Second, 0, 3 * time.Second, 750 * time.Millisecond, 750 * time.Millisecond, 1750 * time.Millisecond},
		// Just under half the lease leaves the thinnest margin: (10 - 9.998)/4 =
		// 0.5ms; (10 - 0.0005 - 4.999)/3 = 1.6668333…; 4.999/4 = 1.24975.
		{"heartbeat just under half", 10 * time.Second, 4999 * time.Millisecond, 4999 * time.Millisecond, 1249750 * time.Microsecond, 500 * time.Microsecond, 1666833333},
		// The shortest lease: 10ms/3 = 3.333…ms, all in whole nanoseconds.
		{"MinLease", MinLease, 0, 3333333, 833333, 833333, 1944444},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSchedule(tc.lease, tc.heartbeat)
			got := [...]time.Duration{s.lease, s.heartbeat, s.retry, s.margin, s.attempt}
			want := [...]time.Duration{tc.lease, tc.wantHeartbeat, tc.wantRetry, tc.wantMargin, tc.wantAttempt}
			if got != want {
				t.Errorf("schedule(%v, %v): lease, heartbeat, retry, margin, attempt = %v, want %v", tc.lease, tc.heartbeat, got, want)
			}
			// What the rest of the package counts on.
			if s.margin <= 0 || s.attempt <= 0 || s.retry <= 0 {
				t.Errorf("a duration is not positive: %+v", s)
			}
			if room := s.lease - s.margin - s.heartbeat; 3*s.attempt > room {
				t.Errorf("three attempts (%v) do not fit between a missed heartbeat and the margin (%v)", 3*s.attempt, room)
			}
			sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			if end := s.localEnd(sent); !end.Equal(sent.Add(tc.lease)) || !s.lostAt(end).Equal(end.Add(-s.margin)) {
				t.Errorf("localEnd %v, lostAt %v for a heartbeat sent at %v", end, s.lostAt(end), sent)
			}
			c := &Claimer{sched: s}
			accessors := [...]time.Duration{c.Settings().Lease, c.Settings().HeartbeatInterval, c.Settings().RetryDelay, c.Settings().ExpiryMargin, c.Settings().HeartbeatTimeout}
			if accessors != want {
				t.Errorf("the Claimer's accessors = %v, want %v", accessors, want)
			}
		})
	}
}

// TestScheduleRefusesSlowHeartbeat: an interval of half the lease or more
// is an error that names WithHeartbeat, from New and from With.
func TestScheduleRefusesSlowHeartbeat(t *testing.T) {
	base, err := New(NewMemoryStore(), WithLease(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, hb := range []time.Duration{5 * time.Second, 6 * time.Second, 10 * time.Second} {
		if c, err := New(NewMemoryStore(), WithLease(10*time.Second), WithHeartbeat(hb)); err == nil || !strings.Contains(err.Error(), "WithHeartbeat") {
			t.Errorf("New(WithLease(10s), WithHeartbeat(%v)) = %v, %v; want an error naming WithHeartbeat", hb, c, err)
		}
		if c, err := base.With(WithHeartbeat(hb)); err == nil || !strings.Contains(err.Error(), "WithHeartbeat") {
			t.Errorf("With(WithHeartbeat(%v)) on a lease of 10s = %v, %v; want an error naming WithHeartbeat", hb, c, err)
		}
	}
	if _, err := New(NewMemoryStore(), WithLease(10*time.Second), WithHeartbeat(4999*time.Millisecond)); err != nil {
		t.Errorf("a heartbeat just under half the lease: %v", err)
	}
}
