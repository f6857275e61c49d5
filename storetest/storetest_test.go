package storetest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMemoryStore runs the whole suite against a fresh memory store per
// subtest. A memory store is shared within one process by sharing the
// value, so each replica is the same *MemoryStore.
func TestMemoryStore(t *testing.T) {
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		s := runclaim.NewMemoryStore()
		return func() runclaim.Store { return s }
	})
}

// TestSharedMemoryStore runs the suite with one store shared by every
// subtest, as a backend on a single shared database would be.
func TestSharedMemoryStore(t *testing.T) {
	s := runclaim.NewMemoryStore()
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		return func() runclaim.Store { return s }
	})
}

// TestNotManyStore runs the suite on a store that is not a
// runclaim.ManyStore, which the many-source cases then ask one source at
// a time.
func TestNotManyStore(t *testing.T) {
	storetest.RunReplicas(t, func(t *testing.T) func() runclaim.Store {
		// It keeps the Controller methods, so that the control cases run
		// (ManyControl through the one-at-a-time path) instead of
		// skipping.
		s := struct{ runclaim.Controller }{runclaim.NewMemoryStore()}
		if _, ok := runclaim.Store(s).(runclaim.ManyStore); ok {
			t.Fatal("the wrapped store is still a ManyStore")
		}
		return func() runclaim.Store { return s }
	})
}

// TestOneEntryPoint: the package exports one function to run the suite,
// RunReplicas, and no older variant beside it.
func TestOneEntryPoint(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.IsExported() {
				exported = append(exported, fn.Name.Name)
			}
		}
	}
	if len(exported) != 1 || exported[0] != "RunReplicas" {
		t.Errorf("exported functions %v, want only RunReplicas", exported)
	}
}
