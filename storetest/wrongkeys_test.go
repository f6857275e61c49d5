package storetest_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/runclaim/runclaim"
)

// The keys of a copyStore backend: its limits, cooldowns and starts. The
// running runs are the backend's own.

type keyStart struct {
	at time.Time
	id int64
}

type keyCool struct {
	until time.Time
	note  string
}

type keyBackend struct {
	limits map[string]runclaim.Limit
	cools  map[string]keyCool
	starts map[string][]keyStart
}

func newKeyBackend() keyBackend {
	return keyBackend{limits: make(map[string]runclaim.Limit), cools: make(map[string]keyCool), starts: make(map[string][]keyStart)}
}

// clone copies k, for bugManyKeysBefore.
func (k *keyBackend) clone() *keyBackend {
	c := &keyBackend{limits: maps.Clone(k.limits), cools: maps.Clone(k.cools), starts: make(map[string][]keyStart)}
	for key, st := range k.starts {
		c.starts[key] = slices.Clone(st)
	}
	return c
}

// check returns the skip of the first key of req with no room at now.
func (k *keyBackend) check(req runclaim.ClaimRequest, now time.Time, running map[string]*memRun, bug bug) error {
	for _, key := range req.Keys {
		skip := func(retry time.Time, note string) error {
			return &runclaim.NotClaimedError{Source: req.Source, Reason: runclaim.ErrLimited, Key: key, RetryAfter: retry, Note: note, Tick: req.Tick}
		}
		if c, ok := k.cools[key]; ok && c.until.After(now) {
			return skip(c.until, c.note)
		}
		l := k.limits[key]
		if l.MaxRunning > 0 {
			n, first := 0, time.Time{}
			for _, r := range running {
				if r.status == runclaim.StatusRunning && r.info.LeaseUntil.After(now) && slices.Contains(r.keys, key) &&
					(bug != bugKeyCountAloneOnly || len(r.keys) == 1) {
					n++
					if first.IsZero() || r.info.LeaseUntil.Before(first) {
						first = r.info.LeaseUntil
					}
				}
			}
			if n >= l.MaxRunning {
				return skip(first, "")
			}
		}
		if l.MaxStarts > 0 {
			var in []time.Time
			for _, st := range k.starts[key] {
				if st.at.After(now.Add(-l.Per)) {
					in = append(in, st.at)
				}
			}
			if len(in) >= l.MaxStarts {
				slices.SortFunc(in, time.Time.Compare)
				return skip(in[len(in)-l.MaxStarts].Add(l.Per), "")
			}
		}
		if st := k.starts[key]; l.MinGap > 0 && len(st) > 0 && bug != bugKeyMinGapIgnored {
			newest := st[len(st)-1]
			if bug == bugKeyMinGapOldest {
				newest = st[0]
			}
			if next := newest.at.Add(l.MinGap); next.After(now) {
				return skip(next, "")
			}
		}
	}
	return nil
}

func (k *keyBackend) started(keys []string, at time.Time, id int64) {
	for _, key := range keys {
		k.starts[key] = append(k.starts[key], keyStart{at, id})
	}
}

func (k *keyBackend) unstarted(keys []string, id int64) {
	for _, key := range keys {
		k.starts[key] = slices.DeleteFunc(k.starts[key], func(st keyStart) bool { return st.id == id })
	}
}

var _ runclaim.Limiter = (*copyStore)(nil)

// keyErr refuses a key as the stores do: a claim that names it is
// refused by ClaimRequest.Validate.
func keyErr(key string) error {
	return runclaim.ClaimRequest{Source: "s", Owner: "o", Lease: time.Minute, Keys: []string{key}}.Validate()
}

// noteErr refuses a note of a pause or a cooldown (kind) as the stores
// do, by asking a MemoryStore, which checks it before anything else.
func noteErr(kind, note string) error {
	ctx := context.Background()
	if kind == "pause" {
		return runclaim.NewMemoryStore().Pause(ctx, "s", time.Time{}, note)
	}
	return runclaim.NewMemoryStore().Cooldown(ctx, "k", time.Now().Add(time.Hour), note)
}

func (s *copyStore) SetLimit(ctx context.Context, key string, l runclaim.Limit) error {
	if err := keyErr(key); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.keys.limits[key] = l
	return nil
}

func (s *copyStore) DeleteLimit(ctx context.Context, key string) error {
	if err := keyErr(key); err != nil {
		return err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	delete(s.b.keys.limits, key)
	return nil
}

func (s *copyStore) Cooldown(ctx context.Context, key string, until time.Time, note string) error {
	if err := keyErr(key); err != nil {
		return err
	}
	if err := noteErr("cooldown", note); err != nil {
		return err
	}
	now := time.Now()
	if !until.After(now) {
		return fmt.Errorf("cooldown %q: until %v is not after now", key, until)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if c, ok := s.b.keys.cools[key]; ok && !until.After(c.until) && s.bug != bugCooldownShortened {
		return nil
	}
	s.b.keys.cools[key] = keyCool{until, note}
	return nil
}

func (s *copyStore) EndCooldown(ctx context.Context, key string) error {
	if err := keyErr(key); err != nil {
		return err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	delete(s.b.keys.cools, key)
	return nil
}
