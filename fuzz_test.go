package runclaim_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
)

// Fuzz targets for hostile and odd input. Their seeds are the table of
// hostile_pg_test.go. CI runs each briefly, one target per invocation:
//
//	go test -run '^$' -fuzz '^FuzzValidateSource$' -fuzztime 10s .
//	go test -run '^$' -fuzz '^FuzzMemoryClaim$' -fuzztime 10s .
//	go test -run '^$' -fuzz '^FuzzTableName$' -fuzztime 10s .
//	go test -run '^$' -fuzz '^FuzzPostgresClaim$' -fuzztime 20s .
//
// Without -fuzz, go test runs the seeds (and testdata/fuzz, if a failure
// was ever saved there) as ordinary tests.

// sourceOK is ValidateSource's rule, written out independently: 1 to
// MaxSourceLen bytes of valid UTF-8 without C0 controls (NUL included),
// DEL or C1 controls, and without the characters that are invisible or act
// on the text around them: Unicode format characters (Cf), the line and
// paragraph separators, variation selectors and the other default-ignorable
// code points.
func sourceOK(s string) bool {
	if !ownerOK(s) {
		return false
	}
	for _, r := range s {
		if r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Cf, r) ||
			unicode.Is(unicode.Variation_Selector, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) {
			return false
		}
	}
	return true
}

// ownerOK is WithOwner's rule (for names up to MaxSourceLen bytes):
// sourceOK's without the invisible characters, which an owner may hold.
func ownerOK(s string) bool {
	if len(s) == 0 || len(s) > runclaim.MaxSourceLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return false
		}
	}
	return true
}

func addSourceSeeds(f *testing.F) {
	for _, h := range hostileSources {
		f.Add(h.s)
	}
}

// checkRefusal checks the error for a refused source: it wraps
// ErrInvalidSource, is not a skip, and is short valid UTF-8 that does not
// carry the source itself (which may be megabytes of binary).
func checkRefusal(t *testing.T, what, source string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s(%q) accepted a source that breaks the rules", what, source)
	case !errors.Is(err, runclaim.ErrInvalidSource):
		t.Fatalf("%s(%q) = %v, want ErrInvalidSource", what, source, err)
	case errors.Is(err, runclaim.ErrNotClaimed):
		t.Fatalf("%s(%q) = %v is a skip", what, source, err)
	case len(err.Error()) > 200 || !utf8.ValidString(err.Error()):
		t.Fatalf("%s(%q): error is %d bytes or not valid UTF-8: %q", what, source, len(err.Error()), err)
	case len(source) > 8 && strings.Contains(err.Error(), source):
		t.Fatalf("%s(%q): the error repeats the source: %q", what, source, err)
	}
}

// FuzzValidateSource: ValidateSource never panics and accepts exactly the
// sources sourceOK accepts; a refusal wraps ErrInvalidSource. AdvisoryKey
// is deterministic on any input.
func FuzzValidateSource(f *testing.F) {
	addSourceSeeds(f)
	f.Fuzz(func(t *testing.T, source string) {
		err := runclaim.ValidateSource(source)
		if want := sourceOK(source); want != (err == nil) {
			t.Fatalf("ValidateSource(%q) = %v, want accepted = %v", source, err, want)
		}
		if err != nil {
			checkRefusal(t, "ValidateSource", source, err)
		}
		if k1, k2 := runclaim.AdvisoryKeyOf("ns", source), runclaim.AdvisoryKeyOf("ns", source); k1 != k2 {
			t.Fatalf("AdvisoryKey(%q) is not deterministic", source)
		}
	})
}

// countingStore counts the calls that reach a Store.
type countingStore struct {
	runclaim.Store
	calls atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, req runclaim.ClaimRequest) (runclaim.RunInfo, error) {
	s.calls.Add(1)
	return s.Store.Claim(ctx, req)
}

// FuzzMemoryClaim: through a Claimer on the memory store, a source is
// either refused with ErrInvalidSource before the store is called (Claim,
// Do, and the store's own Claim), or claimed, heartbeated, finished and
// claimed again by Do with Run.Source byte for byte the input.
func FuzzMemoryClaim(f *testing.F) {
	addSourceSeeds(f)
	f.Fuzz(func(t *testing.T, source string) {
		ctx := context.Background()
		store := &countingStore{Store: runclaim.NewMemoryStore()}
		c, err := runclaim.New(store, runclaim.WithOwner("fuzz"))
		if err != nil {
			t.Fatal(err)
		}
		run, err := c.Claim(ctx, source)
		if !sourceOK(source) {
			checkRefusal(t, "Claim", source, err)
			err = c.Do(ctx, source, func(context.Context, *runclaim.Run) error {
				t.Fatalf("Do(%q) called its function", source)
				return nil
			})
			checkRefusal(t, "Do", source, err)
			if n := store.calls.Load(); n != 0 {
				t.Fatalf("a refused source reached the store %d times", n)
			}
			_, err = store.Claim(ctx, runclaim.ClaimRequest{Source: source, Owner: "fuzz", Lease: time.Minute})
			checkRefusal(t, "MemoryStore.Claim", source, err)
			return
		}
		if err != nil {
			t.Fatalf("Claim(%q): %v", source, err)
		}
		if run.Source != source {
			t.Fatalf("Run.Source = %q, want %q", run.Source, source)
		}
		if err := run.Heartbeat(ctx); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		if _, err := c.Claim(ctx, source); !errors.Is(err, runclaim.ErrAlreadyRunning) {
			t.Fatalf("second Claim(%q) while held: %v, want ErrAlreadyRunning", source, err)
		}
		if err := run.Finish(ctx, nil); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		var seen string
		if err := c.Do(ctx, source, func(_ context.Context, r *runclaim.Run) error { seen = r.Source; return nil }); err != nil {
			t.Fatalf("Do(%q) after Finish: %v", source, err)
		}
		if seen != source {
			t.Fatalf("Do's Run.Source = %q, want %q", seen, source)
		}
	})
}

// tableNameOK is WithTable's rule for one name, written out independently.
func tableNameOK(s string, max int) bool {
	if len(s) == 0 || len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return false
		}
	}
	return true
}

// dollarTag matches the opening tag of a dollar-quoted string literal.
var dollarTag = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)

// splitIdents lexes SQL just enough to take out every double-quoted
// identifier: it returns the identifiers, unquoted, and the SQL with each
// replaced by a placeholder. String literals are skipped whole. A
// dollar-quoted literal (a function's body) is lexed the same way inside,
// and its tag, which changes with what the body holds, is replaced by a
// placeholder. ok is false if a quoted identifier or a string literal is
// not closed.
func splitIdents(sql string) (idents []string, skeleton string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(sql); {
		if sql[i] != '$' && sql[i] != '"' && sql[i] != '\'' {
			// Up to the next byte that may start a literal or an identifier,
			// as it is.
			j := strings.IndexAny(sql[i:], "$\"'")
			if j < 0 {
				j = len(sql) - i
			}
			b.WriteString(sql[i : i+j])
			i += j
			continue
		}
		if tag := dollarTag.FindString(sql[i:]); tag != "" && (i == 0 || !isIdentByte(sql[i-1])) {
			end := strings.Index(sql[i+len(tag):], tag)
			if end < 0 {
				return nil, "", false
			}
			inner, skel, ok := splitIdents(sql[i+len(tag) : i+len(tag)+end])
			if !ok {
				return nil, "", false
			}
			idents = append(idents, inner...)
			b.WriteString("$<tag>$" + skel + "$<tag>$")
			i += 2*len(tag) + end
			continue
		}
		switch sql[i] {
		case '"', '\'':
			q := sql[i]
			var name strings.Builder
			j := i + 1
			closed := false
			for j < len(sql) {
				if sql[j] == q {
					if j+1 < len(sql) && sql[j+1] == q {
						name.WriteByte(q)
						j += 2
						continue
					}
					closed = true
					break
				}
				name.WriteByte(sql[j])
				j++
			}
			if !closed {
				return nil, "", false
			}
			if q == '"' {
				idents = append(idents, name.String())
				b.WriteString("<ident>")
			} else {
				b.WriteString(sql[i : j+1])
			}
			i = j + 1
		default:
			b.WriteByte(sql[i])
			i++
		}
	}
	return idents, b.String(), true
}

// isIdentByte reports whether c may continue an unquoted identifier.
func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// FuzzTableName: NewPostgresStore(WithTable(schema, table)) refuses the
// names, naming WithTable, exactly when they break the rules. Otherwise
// Table() is the two names quoted, and SchemaSQL() is, once its quoted
// identifiers are taken out, the same statement text as for harmless names:
// nothing in a name can end an identifier and inject SQL. The identifiers
// are exactly the names (and the index and function names derived from the
// table name); the claim function's dollar-quoted body holds no tag that ends it.
func FuzzTableName(f *testing.F) {
	for _, n := range hostileTableNames {
		f.Add(n.schema, n.table)
	}
	for _, h := range hostileSources {
		f.Add("public", h.s)
	}
	// Names that hold the dollar-quote tags of the claim function's body.
	f.Add("public", "t$q$; DROP TABLE x; --")
	f.Add("$q$", "$q0$$q1$")
	pool := &pgxpool.Pool{} // never used: nothing is sent
	skeletonFor := func(schema string) string {
		s, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(schema, "t"))
		if err != nil {
			f.Fatal(err)
		}
		_, skel, ok := splitIdents(s.SchemaSQL())
		if !ok {
			f.Fatalf("SchemaSQL does not lex: %s", s.SchemaSQL())
		}
		return skel
	}
	publicSkeleton, otherSkeleton := skeletonFor(runclaim.DefaultSchema), skeletonFor("s")

	f.Fuzz(func(t *testing.T, schema, table string) {
		s, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(schema, table))
		want := tableNameOK(schema, 63) && tableNameOK(table, 55)
		if want != (err == nil) {
			t.Fatalf("WithTable(%q, %q): error %v, want accepted = %v", schema, table, err, want)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "WithTable") {
				t.Fatalf("WithTable(%q, %q): error %q does not name WithTable", schema, table, err)
			}
			return
		}
		idents, rest, ok := splitIdents(s.Table())
		if !ok || rest != "<ident>.<ident>" || !slices.Equal(idents, []string{schema, table}) {
			t.Fatalf("Table() = %s: lexes as %q around %q (ok %v), want exactly %q.%q", s.Table(), idents, rest, ok, schema, table)
		}
		idents, skel, ok := splitIdents(s.SchemaSQL())
		if !ok {
			t.Fatalf("SchemaSQL does not lex:\n%s", s.SchemaSQL())
		}
		wantSkel := otherSkeleton
		wantIdents := []string{schema, schema, table, table + "_running", schema, table, table + "_history", schema, table,
			schema, table, // version 1's COMMENT ON TABLE
			schema, table, // version 2's ALTER TABLE
			schema, table, // and its COMMENT ON TABLE
			schema, table + "_claim"} // version 3's function
		for range 6 { // the table in its body
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, schema, table) // and version 3's COMMENT ON TABLE
		wantIdents = append(wantIdents, schema, table, // version 4's ALTER TABLE
			table+"_tick", schema, table, // its index
			schema, table+"_claim") // its function
		for range 7 { // the table in its body
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, schema, table) // and version 4's COMMENT ON TABLE
		control := []string{schema, table + "_control"}
		wantIdents = append(wantIdents, control...)             // version 5's table
		wantIdents = append(wantIdents, schema, table)          // the grants' block: the runs table
		wantIdents = append(wantIdents, control...)             // and the control table, as literals
		wantIdents = append(wantIdents, schema, table+"_claim") // the function with a tick
		wantIdents = append(wantIdents, schema, table)          // in its body: the running run
		wantIdents = append(wantIdents, control...)             // and the pause and trigger
		for range 5 {                                           // the tick, the interval, the expiry
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)                                     // the trigger used
		wantIdents = append(wantIdents, schema, table)                                  // the insert
		wantIdents = append(wantIdents, schema, table+"_claim", schema, table+"_claim") // the other function, which calls it
		wantIdents = append(wantIdents, schema, table)                                  // and version 5's COMMENT ON TABLE
		wantIdents = append(wantIdents, schema, table+"_claim")                         // version 6's function with a tick
		for range 2 {                                                                   // its body: the running run and
			wantIdents = append(wantIdents, schema, table) // the pause, before the lock and under it
			wantIdents = append(wantIdents, control...)
		}
		for range 5 { // the tick, the interval, the expiry
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)                                     // the trigger used
		wantIdents = append(wantIdents, schema, table)                                  // the insert
		wantIdents = append(wantIdents, schema, table+"_claim", schema, table+"_claim") // the other function, which calls it
		wantIdents = append(wantIdents, schema, table)                                  // and version 6's COMMENT ON TABLE
		wantIdents = append(wantIdents, schema, table+"_claim")                         // version 7's function with a tick
		for range 2 {                                                                   // its body: the running run and
			wantIdents = append(wantIdents, schema, table) // the pause, before the lock and under it
			wantIdents = append(wantIdents, control...)
		}
		for range 6 { // the tick, the interval, the expiry, the tick again
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)    // the trigger used
		wantIdents = append(wantIdents, schema, table) // the insert
		wantIdents = append(wantIdents, schema, table) // and version 7's COMMENT ON TABLE
		keys, starts := []string{schema, table + "_keys"}, []string{schema, table + "_starts"}
		wantIdents = append(wantIdents, schema, table)                  // version 8's ALTER TABLE
		wantIdents = append(wantIdents, table+"_keyed", schema, table)  // its indexes
		wantIdents = append(wantIdents, table+"_keyset", schema, table) // of running runs' keys
		wantIdents = append(wantIdents, keys...)                        // the keys table
		wantIdents = append(wantIdents, starts...)                      // the starts table
		wantIdents = append(wantIdents, schema, table)                  // the grants' block: the runs table
		wantIdents = append(wantIdents, keys...)                        // and the new tables, as literals
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_claim") // the overload with keys
		for range 2 {                                           // its body: the running run and
			wantIdents = append(wantIdents, schema, table) // the pause, before the lock and under it
			wantIdents = append(wantIdents, control...)
		}
		for range 2 { // the tick, the interval
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, schema, table) // a batch's check of a key: its running runs
		wantIdents = append(wantIdents, schema, table) // (naming it alone, and with others),
		wantIdents = append(wantIdents, starts...)     // its starts in the window
		wantIdents = append(wantIdents, keys...)       // and its row
		wantIdents = append(wantIdents, starts...)     // a fast batch's old starts
		wantIdents = append(wantIdents, starts...)     // a key's starts in the window
		wantIdents = append(wantIdents, keys...)       // its row
		wantIdents = append(wantIdents, schema, table) // its running runs (naming it alone,
		wantIdents = append(wantIdents, schema, table) // and with others)
		wantIdents = append(wantIdents, starts...)     // the start that must leave the window
		for range 4 {                                  // the expiry, the tick again
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)    // the trigger used
		wantIdents = append(wantIdents, schema, table) // a fast batch's insert
		wantIdents = append(wantIdents, schema, table) // the insert
		wantIdents = append(wantIdents, starts...)     // its starts
		wantIdents = append(wantIdents, starts...)     // and, one win in 64, the old ones
		wantIdents = append(wantIdents, schema, table) // and version 8's COMMENT ON TABLE
		states := []string{schema, table + "_cursors"}
		wantIdents = append(wantIdents, states...)              // version 9's table of states
		wantIdents = append(wantIdents, schema, table)          // the grants' block: the runs table
		wantIdents = append(wantIdents, states...)              // and the new table, as a literal
		wantIdents = append(wantIdents, schema, table+"_claim") // the overload with a state
		for range 2 {                                           // its body, that of the overload with keys for a single claim: the running run and
			wantIdents = append(wantIdents, schema, table) // the pause, before the lock and under it
			wantIdents = append(wantIdents, control...)
		}
		for range 2 { // the tick, the interval
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, starts...)     // a key's starts in the window
		wantIdents = append(wantIdents, keys...)       // its row
		wantIdents = append(wantIdents, schema, table) // its running runs (naming it alone,
		wantIdents = append(wantIdents, schema, table) // and with others)
		wantIdents = append(wantIdents, starts...)     // the start that must leave the window
		for range 4 {                                  // the expiry, the tick again
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)    // the trigger used
		wantIdents = append(wantIdents, schema, table) // the insert without keys
		wantIdents = append(wantIdents, schema, table) // the insert with keys
		wantIdents = append(wantIdents, starts...)     // its starts
		wantIdents = append(wantIdents, starts...)     // and, one win in 64, the old ones
		wantIdents = append(wantIdents, states...)     // the state of a win
		wantIdents = append(wantIdents, schema, table) // and version 9's COMMENT ON TABLE
		wantIdents = append(wantIdents, starts...)     // version 10's column of the starts table,
		wantIdents = append(wantIdents, starts...)     // numbered: the update
		wantIdents = append(wantIdents, starts...)     // from its rows
		wantIdents = append(wantIdents, table+"_nth")  // the index of starts by number
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_keylock") // the key's lock in SQL,
		wantIdents = append(wantIdents, schema, table)            // of the runs table's name, a literal
		wantIdents = append(wantIdents, schema, table+"_number")  // a start numbered
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_top") // a key's newest number
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_renum") // a gap closed,
		wantIdents = append(wantIdents, schema, table+"_keylock")
		wantIdents = append(wantIdents, starts...) // the starts below it
		wantIdents = append(wantIdents, starts...) // and those above, moved
		wantIdents = append(wantIdents, starts...) // the triggers, each dropped and created
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_number")
		wantIdents = append(wantIdents, starts...) // the column NOT NULL
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, schema, table+"_renum")
		wantIdents = append(wantIdents, schema, table)          // the grants' block: the runs table
		wantIdents = append(wantIdents, starts...)              // and the starts table, as a literal
		wantIdents = append(wantIdents, schema, table+"_claim") // the overload with keys, again
		for range 2 {
			wantIdents = append(wantIdents, schema, table)
			wantIdents = append(wantIdents, control...)
		}
		for range 2 {
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, schema, table, schema, table) // a batch's check of a key: its running runs,
		wantIdents = append(wantIdents, starts...)                    // a start by its number
		wantIdents = append(wantIdents, starts...)                    // from the newest
		wantIdents = append(wantIdents, keys...)                      // and its row
		wantIdents = append(wantIdents, starts...)                    // a fast batch's old starts
		wantIdents = append(wantIdents, starts...)                    // a key's MaxStarts-th newest start
		wantIdents = append(wantIdents, starts...)                    // from the newest
		wantIdents = append(wantIdents, keys...)                      // its row
		wantIdents = append(wantIdents, schema, table, schema, table) // its running runs
		for range 4 {
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)
		wantIdents = append(wantIdents, schema, table, schema, table) // the inserts
		wantIdents = append(wantIdents, starts...)                    // of starts,
		wantIdents = append(wantIdents, starts...)                    // each numbered,
		wantIdents = append(wantIdents, starts...)                    // and the old ones
		wantIdents = append(wantIdents, schema, table+"_claim")       // the overload with a state, again:
		wantIdents = append(wantIdents, schema, table)                // the running run and the pause
		wantIdents = append(wantIdents, control...)                   // before the source's lock,
		wantIdents = append(wantIdents, schema, table, schema, table) // or, naming keys, with the latest start,
		wantIdents = append(wantIdents, control...)
		wantIdents = append(wantIdents, starts...)                    // a key's MaxStarts-th newest start
		wantIdents = append(wantIdents, starts...)                    // from the newest,
		wantIdents = append(wantIdents, keys...)                      // its row,
		wantIdents = append(wantIdents, schema, table, schema, table) // its running runs,
		wantIdents = append(wantIdents, schema, table)                // the tick, for a full key;
		wantIdents = append(wantIdents, schema, table, schema, table) // under the lock, the latest start, the running run
		wantIdents = append(wantIdents, control...)                   // and the pause,
		wantIdents = append(wantIdents, schema, table)                // the tick
		for range 4 {
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, control...)
		wantIdents = append(wantIdents, schema, table, schema, table)
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, starts...)
		wantIdents = append(wantIdents, states...)
		wantIdents = append(wantIdents, schema, table) // and version 10's COMMENT ON TABLE
		// The claim function of one body (sql/claim.sql): version 11's;
		// version 12's, which reads a paced key's newest start in a
		// batch's check and in a key's query (paced); and version 13's,
		// which reads a reservation, records a stop request, reads the
		// ticks of replaced runs and clears a reservation (replace).
		claimBody := func(fn string, paced, replace bool) {
			wantIdents = append(wantIdents, schema, fn)    // the function:
			wantIdents = append(wantIdents, schema, table) // the latest start,
			wantIdents = append(wantIdents, states...)     // the state,
			if replace {
				wantIdents = append(wantIdents, schema, table) // the run of a reservation,
			}
			wantIdents = append(wantIdents, schema, table) // the running run
			wantIdents = append(wantIdents, control...)    // and the pause, under the lock;
			if replace {                                   // a stop request: the ticks served, the request, the reservation
				wantIdents = append(wantIdents, schema, table, schema, table, schema, table)
				wantIdents = append(wantIdents, control...)
				wantIdents = append(wantIdents, schema, table) // the ticks of replaced runs
			}
			wantIdents = append(wantIdents, schema, table) // the tick
			for range 2 {                                  // a batch's check of a key: its running runs,
				wantIdents = append(wantIdents, schema, table)
			}
			wantIdents = append(wantIdents, starts...) // a start by its number
			wantIdents = append(wantIdents, starts...) // from the newest
			if paced {
				wantIdents = append(wantIdents, starts...) // the newest start of a paced key
			}
			wantIdents = append(wantIdents, keys...)   // and its row
			wantIdents = append(wantIdents, starts...) // a fast batch's old starts
			wantIdents = append(wantIdents, starts...) // a key's MaxStarts-th newest start
			wantIdents = append(wantIdents, starts...) // from the newest
			if paced {
				wantIdents = append(wantIdents, starts...) // the newest start of a paced key
			}
			wantIdents = append(wantIdents, keys...) // its row
			for range 6 {                            // its running runs, the expiry, the tick again
				wantIdents = append(wantIdents, schema, table)
			}
			if replace {
				wantIdents = append(wantIdents, schema, table) // and that of replaced runs
			}
			wantIdents = append(wantIdents, control...) // the trigger used
			if replace {
				wantIdents = append(wantIdents, control...) // and the reservation
			}
			wantIdents = append(wantIdents, schema, table, schema, table) // the inserts
			wantIdents = append(wantIdents, starts...)                    // of starts,
			wantIdents = append(wantIdents, starts...)                    // each numbered,
			wantIdents = append(wantIdents, starts...)                    // and the old ones
			wantIdents = append(wantIdents, states...)                    // the state of a win
		}
		claimBody(table+"_claim11", false, false)                 // version 11's function
		wantIdents = append(wantIdents, schema, table+"_claim")   // the grants: of the overload of version 9,
		wantIdents = append(wantIdents, schema, table+"_claim11") // to the new function, as literals
		wantIdents = append(wantIdents, schema, table+"_claim11")
		wantIdents = append(wantIdents, schema, table)            // and version 11's COMMENT ON TABLE
		wantIdents = append(wantIdents, keys...)                  // version 12's column of the keys table,
		claimBody(table+"_claim12", true, false)                  // its function,
		wantIdents = append(wantIdents, schema, table+"_claim11") // the grants: of version 11's function,
		wantIdents = append(wantIdents, schema, table+"_claim12") // to the new one, as literals
		wantIdents = append(wantIdents, schema, table+"_claim12")
		wantIdents = append(wantIdents, schema, table) // and version 12's COMMENT ON TABLE
		wantIdents = append(wantIdents, schema, table) // version 13's columns of the runs table
		wantIdents = append(wantIdents, control...)    // and of the control table,
		for range 4 {                                  // the check of the status, as literals,
			wantIdents = append(wantIdents, schema, table)
		}
		wantIdents = append(wantIdents, table+"_replcd", schema, table) // the index of replaced runs' ticks,
		wantIdents = append(wantIdents, schema, table)                  // the grants on the control table,
		wantIdents = append(wantIdents, control...)
		claimBody(table+"_claim13", true, true)                   // its function,
		wantIdents = append(wantIdents, schema, table+"_claim12") // the grants: of version 12's function,
		wantIdents = append(wantIdents, schema, table+"_claim13") // to the new one, as literals
		wantIdents = append(wantIdents, schema, table+"_claim13")
		wantIdents = append(wantIdents, schema, table) // and version 13's COMMENT ON TABLE
		if schema == runclaim.DefaultSchema {
			wantSkel, wantIdents = publicSkeleton, wantIdents[1:]
		}
		if skel != wantSkel {
			t.Fatalf("SchemaSQL for %q.%q has other statements than for harmless names:\n%s\nwant:\n%s", schema, table, skel, wantSkel)
		}
		if !slices.Equal(idents, wantIdents) {
			t.Fatalf("SchemaSQL identifiers %q, want %q", idents, wantIdents)
		}
	})
}
