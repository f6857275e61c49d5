package main

import (
	"testing"
	"time"
)

func TestParseTick(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 2, 500_000_000, time.UTC) // cron started the job 2.5 s late
	for _, tc := range []struct {
		tick  string
		every time.Duration
		want  time.Time
		bad   bool
	}{
		{"", 0, time.Time{}, false},
		{"now", 5 * time.Minute, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), false},
		{"now", time.Second, time.Date(2026, 3, 1, 12, 0, 3, 0, time.UTC), false},
		{"2026-03-01T11:55:00Z", 0, time.Date(2026, 3, 1, 11, 55, 0, 0, time.UTC), false},
		{"2026-03-01T14:55:00+03:00", 0, time.Date(2026, 3, 1, 11, 55, 0, 0, time.UTC), false},
		{"now", 0, time.Time{}, true},
		{"now", -time.Minute, time.Time{}, true},
		{"", time.Minute, time.Time{}, true},
		{"2026-03-01T11:55:00Z", time.Minute, time.Time{}, true},
		{"yesterday", 0, time.Time{}, true},
		{"0001-01-01T00:00:00Z", 0, time.Time{}, true},
	} {
		got, err := parseTick(tc.tick, tc.every, now)
		if (err != nil) != tc.bad || !got.Equal(tc.want) {
			t.Errorf("parseTick(%q, %v) = %v, %v; want %v, error %v", tc.tick, tc.every, got, err, tc.want, tc.bad)
		}
	}
}
