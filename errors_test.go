package runclaim_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/runclaim/runclaim"
)

// TestSkipReasons: SkipReasons lists every reason to skip that the package
// declares (each "var ErrX = newSkip(...)" in its source), once, with a
// label of lower-case words joined by "_", each its own; and
// NotClaimedError.Label returns a reason's label, and "other" for a reason
// not listed.
func TestSkipReasons(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	declared := map[string]bool{}
	for _, f := range files {
		if m, _ := filepath.Match("*_test.go", f); m {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, v := range vs.Values {
				if call, ok := v.(*ast.CallExpr); ok {
					if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "newSkip" {
						declared[vs.Names[i].Name] = true
					}
				}
			}
			return true
		})
	}
	sentinels := map[string]error{
		"ErrAlreadyRunning": runclaim.ErrAlreadyRunning, "ErrTooSoon": runclaim.ErrTooSoon,
		"ErrTickDone": runclaim.ErrTickDone, "ErrPaused": runclaim.ErrPaused, "ErrLimited": runclaim.ErrLimited,
	}
	for name := range declared {
		if sentinels[name] == nil {
			t.Errorf("%s is declared with newSkip but not known to this test: add it here and to SkipReasons", name)
		}
	}
	if len(declared) != len(sentinels) {
		t.Errorf("the source declares %d reasons to skip, the test knows %d", len(declared), len(sentinels))
	}
	label := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seenErr, seenLabel := map[error]bool{}, map[string]bool{}
	for _, r := range runclaim.SkipReasons {
		if seenErr[r.Err] || seenLabel[r.Label] {
			t.Errorf("%v (%q) listed twice", r.Err, r.Label)
		}
		seenErr[r.Err], seenLabel[r.Label] = true, true
		if !label.MatchString(r.Label) || r.Label == "other" {
			t.Errorf("label %q of %v: want lower-case words joined by _, not other", r.Label, r.Err)
		}
		nc := &runclaim.NotClaimedError{Source: "s", Reason: r.Err}
		if got := nc.Label(); got != r.Label {
			t.Errorf("Label of a skip for %v = %q, want %q", r.Err, got, r.Label)
		}
	}
	for name, err := range sentinels {
		if !seenErr[err] {
			t.Errorf("%s is missing from SkipReasons", name)
		}
	}
	if got := (&runclaim.NotClaimedError{Reason: errors.New("x")}).Label(); got != "other" {
		t.Errorf("Label of an unlisted reason = %q, want other", got)
	}
}
