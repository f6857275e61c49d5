package runclaim_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
)

// Rule: the runclaim module requires pgx, and, for its tests, the test
// libraries; nothing else directly. The adapters, the CLI, the metrics
// packages and the examples are modules of their own (go.work), so that a
// service that imports only runclaim pulls in no scheduler, OpenTelemetry
// or Prometheus module.
func TestModuleRequirements(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(goTool, "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Module  struct{ Path string }
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != "github.com/runclaim/runclaim" {
		t.Fatalf("go mod edit -json read the module %q", mod.Module.Path)
	}
	allowed := []string{
		"github.com/jackc/pgx/v5", // the library's one requirement at run time
		// The test libraries.
		"github.com/google/go-cmp",
		"github.com/moby/moby/api",
		"github.com/testcontainers/testcontainers-go",
		"github.com/testcontainers/testcontainers-go/modules/postgres",
		"go.uber.org/goleak",
	}
	direct := 0
	for _, r := range mod.Require {
		if r.Indirect {
			continue
		}
		direct++
		if !slices.Contains(allowed, r.Path) {
			t.Errorf("the runclaim module requires %s directly; only pgx and the test libraries belong there", r.Path)
		}
	}
	if direct == 0 {
		t.Error("go mod edit -json listed no direct requirement, not even pgx")
	}
}
