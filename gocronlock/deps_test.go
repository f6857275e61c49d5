package gocronlock_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreDoesNotImportSchedulers checks that importing the core package
// compiles none of the scheduler or metrics libraries that the adapters and
// examples use: they stay in their own packages (and, for Prometheus, in a
// module of its own).
func TestCoreDoesNotImportSchedulers(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/runclaim/runclaim").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed nothing")
	}
	for _, dep := range deps {
		for _, banned := range []string{"github.com/go-co-op/gocron", "github.com/robfig/cron", "github.com/prometheus/", "github.com/jonboulle/clockwork"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the core package depends on %s", dep)
			}
		}
	}
}
