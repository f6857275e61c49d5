package runclaim_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runclaim/runclaim"
)

// TestSentinelsReadAsSentinels: every exported Err variable of the package
// is declared without a type, as "var ErrX = errors.New(...)" or
// "var ErrX = newSkip(...)" with a string, so that go doc shows it as a
// sentinel and not as "var ErrX error = &skipError{...}".
func TestSentinelsReadAsSentinels(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Err") || !id.IsExported() {
						continue
					}
					seen++
					call, ok := valueAt(vs, i).(*ast.CallExpr)
					if vs.Type != nil || !ok || len(call.Args) != 1 {
						t.Errorf("%s: var %s is not declared as \"var %s = errors.New(...)\" or newSkip(...)", fset.Position(id.Pos()), id.Name, id.Name)
						continue
					}
					if lit, ok := call.Args[0].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
						t.Errorf("%s: var %s: the message is not a string literal", fset.Position(id.Pos()), id.Name)
					}
				}
			}
		}
	}
	if seen < 7 {
		t.Errorf("found %d exported Err variables, want at least the 7 of errors.go", seen)
	}
	// The reasons to skip still match ErrNotClaimed, alone or wrapped.
	for _, reason := range []error{runclaim.ErrAlreadyRunning, runclaim.ErrTooSoon} {
		if !errors.Is(reason, runclaim.ErrNotClaimed) || !errors.Is(&runclaim.NotClaimedError{Source: "s", Reason: reason}, runclaim.ErrNotClaimed) {
			t.Errorf("%v does not match ErrNotClaimed", reason)
		}
	}
	if errors.Is(runclaim.ErrTooSoon, runclaim.ErrAlreadyRunning) || errors.Is(runclaim.ErrAlreadyRunning, runclaim.ErrTooSoon) {
		t.Error("the reasons to skip match each other")
	}
}

func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

// TestPackageDocTickerLink: the package doc shows one claim and links to
// the ticker loop, which lives in one example, instead of repeating it.
func TestPackageDocTickerLink(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("examples_ticker_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "ExampleForTick") || !strings.Contains(string(example), "func ExampleForTick()") {
		t.Error("the package doc does not link to ExampleForTick, or the example is gone")
	}
	if strings.Contains(string(doc), "time.Until(") {
		t.Error("the package doc repeats the ticker loop")
	}
}
