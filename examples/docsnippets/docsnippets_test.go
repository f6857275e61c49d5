// Package docsnippets compiles the Go code blocks of the README and of
// docs/*.md, so that a block that no longer compiles (a renamed API, a
// wrong signature, a bare return in a function that returns an error)
// fails the tests instead of misleading a reader.
//
// A block that starts with "package" is compiled as it is. Any other is a
// snippet: its top-level declarations (a line that starts with func, type,
// var or const) stay at the top level, and the rest becomes the body of a
// function, which returns an error if the snippet returns one. Imports are
// added for the packages the snippet names (imports below). The names a
// snippet takes from the prose around it (a claimer, a sweep function)
// are declared by the HTML comment right above the block, beside those
// that every snippet may use (common, below):
//
//	<!-- snippet: var claimer *runclaim.Claimer; func sweep(ctx context.Context, run *runclaim.Run) error -->
//
// or, for every block of a file, by a comment <!-- snippets: ... --> in
// it; and a block that is not Go to compile (a listing of signatures) says
// why: <!-- snippet: skip, a listing of signatures -->.
//
// What a snippet declares and leaves unused is allowed: a snippet shows a
// call, and what the reader does with its result comes after it. Every
// other compiler error fails the test, with the file and line of the
// markdown.
package docsnippets

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// imports are the packages a snippet may name, by the name it uses.
var imports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"log":          "log",
	"os":           "os",
	"slog":         "log/slog",
	"strings":      "strings",
	"uuid":         "github.com/google/uuid",
	"time":         "time",
	"pgx":          "github.com/jackc/pgx/v5",
	"pgxpool":      "github.com/jackc/pgx/v5/pgxpool",
	"cron":         "github.com/robfig/cron/v3",
	"gocron":       "github.com/go-co-op/gocron/v2",
	"prometheus":   "github.com/prometheus/client_golang/prometheus",
	"runclaim":     "github.com/runclaim/runclaim",
	"cronlock":     "github.com/runclaim/runclaim/cronlock",
	"gocronlock":   "github.com/runclaim/runclaim/gocronlock",
	"runclaimotel": "github.com/runclaim/runclaim/runclaimotel",
	"runclaimprom": "github.com/runclaim/runclaim/runclaimprom",
	"runclaimui":   "github.com/runclaim/runclaim/runclaimui",
}

type block struct {
	file  string // the markdown file, from the repository's root
	line  int    // the line of the block's first line of code
	code  string
	decls string // the snippet comment's declarations
}

var (
	fence    = regexp.MustCompile("(?s)(<!-- snippet: ([^\n]*?) -->\n[ \t]*)?```go\n(.*?)```")
	fileDecl = regexp.MustCompile(`<!-- snippets: ([^\n]*?) -->`)
	usedPkg  = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.`)
	errLine  = regexp.MustCompile(`(?m)^(?:\./)?(b\d+)/main\.go:(\d+):\d+: (.*)$`)
	unused   = regexp.MustCompile(`declared and not used|imported and not used`)
	retErr   = regexp.MustCompile(`\breturn [^\n]`)
)

// blocks returns the Go blocks of the README and docs/*.md.
func blocks(t *testing.T, root string) []block {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		fileDecls := "" // the file's own, for every block of it
		if m := fileDecl.FindSubmatch(text); m != nil {
			fileDecls = string(m[1])
		}
		for _, m := range fence.FindAllStringSubmatchIndex(string(text), -1) {
			decls := fileDecls
			if m[4] >= 0 {
				decls = string(text[m[4]:m[5]])
			}
			if strings.HasPrefix(decls, "skip") {
				continue
			}
			out = append(out, block{file: rel, line: strings.Count(string(text[:m[6]]), "\n") + 1, code: string(text[m[6]:m[7]]), decls: decls})
		}
	}
	return out
}

// source is b as a Go file, and the line of the file at which b's code
// starts.
func (b block) source() (string, int) {
	if strings.HasPrefix(b.code, "package ") {
		return b.code, 1
	}
	var top, body []string
	lines := strings.Split(strings.TrimRight(b.code, "\n"), "\n")
	// A snippet is either declarations or statements: one whose first
	// line declares keeps its lines at the top level.
	declarations := strings.HasPrefix(lines[0], "func ") || strings.HasPrefix(lines[0], "type ")
	if declarations {
		top = lines
	} else {
		body = lines
	}
	var imps []string
	seen := map[string]bool{}
	for _, m := range usedPkg.FindAllStringSubmatch(common+"\n"+b.code+"\n"+b.decls, -1) {
		if path, ok := imports[m[1]]; ok && !seen[m[1]] {
			seen[m[1]] = true
			imps = append(imps, fmt.Sprintf("%s %q", m[1], path))
		}
	}
	var s strings.Builder
	s.WriteString("package main\n\nimport (\n")
	for _, imp := range imps {
		s.WriteString("\t" + imp + "\n")
	}
	s.WriteString(")\n\n" + common + "\n")
	for _, d := range strings.Split(b.decls, ";") {
		d = strings.TrimSpace(d)
		if strings.HasPrefix(d, "func ") && !strings.Contains(d, "{") {
			d += ` { panic("a stub of the prose") }` // a function the prose names
		}
		if d != "" {
			s.WriteString(d + "\n")
		}
	}
	for _, imp := range imps { // keep every import used
		name := strings.Fields(imp)[0]
		s.WriteString(fmt.Sprintf("var _ = %s.%s\n", name, anyName[name]))
	}
	s.WriteString("\nfunc main() {}\n\n")
	start := strings.Count(s.String(), "\n") + 1
	if declarations {
		s.WriteString(strings.Join(top, "\n") + "\n")
		return s.String(), start
	}
	result := ""
	if retErr.MatchString(b.code) {
		result = " error"
	}
	s.WriteString("func snippet()" + result + " {\n")
	s.WriteString(strings.Join(body, "\n") + "\n")
	if result != "" {
		s.WriteString("\treturn nil\n")
	}
	s.WriteString("}\n")
	return s.String(), start + 1
}

// common declares what every snippet may use without saying so: the
// names the docs give the usual values.
const common = `var (
	ctx     context.Context
	claimer *runclaim.Claimer
	store   *runclaim.PostgresStore
	pool    *pgxpool.Pool
	logger  cron.Logger
)`

// anyName is an exported name of each package, to keep its import used.
var anyName = map[string]string{
	"context": "Background", "errors": "New", "fmt": "Sprint", "http": "Error", "log": "Print",
	"os": "Getenv", "slog": "Info", "time": "Now", "pgx": "Identifier{}", "pgxpool": "New",
	"cron": "New", "gocron": "NewScheduler", "prometheus": "NewRegistry", "runclaim": "New",
	"cronlock": "Job", "gocronlock": "New", "runclaimotel": "New", "runclaimprom": "New", "runclaimui": "New",
	"strings": "Cut", "uuid": "New",
}

// TestDocBlocksCompile compiles every Go block of the README and docs/.
func TestDocBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every block with the go command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks(t, root)
	if len(bs) < 20 {
		t.Fatalf("found %d Go blocks in README.md and docs/, want 20 or more: is the fence pattern right?", len(bs))
	}
	// The generated packages live inside this module, so that the go
	// command resolves their imports through the workspace.
	dir, err := os.MkdirTemp(".", "gen")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	starts := make([]int, len(bs))
	for i, b := range bs {
		src, start := b.source()
		starts[i] = start
		p := filepath.Join(dir, fmt.Sprintf("b%d", i))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-gcflags=-e", "-o", os.DevNull, "./...")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	failed := 0
	for _, m := range errLine.FindAllStringSubmatch(string(out), -1) {
		if unused.MatchString(m[3]) {
			continue
		}
		var i, line int
		fmt.Sscanf(m[1], "b%d", &i)
		fmt.Sscanf(m[2], "%d", &line)
		b := bs[i]
		t.Errorf("%s:%d: %s", b.file, b.line+line-starts[i], m[3])
		failed++
	}
	if failed == 0 && cmd.ProcessState.ExitCode() != 0 && !onlyUnused(string(out)) {
		t.Fatalf("go build failed:\n%s", out)
	}
}

// onlyUnused reports whether every compiler error in out is about a name
// declared and not used.
func onlyUnused(out string) bool {
	for _, m := range errLine.FindAllStringSubmatch(out, -1) {
		if !unused.MatchString(m[3]) {
			return false
		}
	}
	return true
}
