package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickstart checks that the README's quickstart is this program,
// so that the code a newcomer copies is the code that compiles here.
func TestReadmeQuickstart(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "## Quickstart\n")
	if !ok {
		t.Fatal(`README.md has no "## Quickstart" section`)
	}
	_, block, ok = strings.Cut(block, "```go\n")
	if !ok {
		t.Fatal("README.md's quickstart has no Go block")
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("README.md's quickstart block does not end")
	}
	// main.go is the block after its package comment.
	_, program, ok := strings.Cut(string(src), "\npackage main\n")
	if !ok {
		t.Fatal("main.go has no package clause")
	}
	if want := "package main\n" + program; block != want {
		t.Errorf("README.md's quickstart differs from examples/quickstart/main.go:\n--- README.md\n%s\n--- main.go\n%s", block, want)
	}
}
