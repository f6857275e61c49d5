package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestUICommand: 'runclaim ui' serves the console on the address it
// prints, read-only by default, and stops cleanly when its context ends.
func TestUICommand(t *testing.T) {
	db, _ := setup(t)
	mustRun(t, db, exitOK, "pause", "avito", "--note", "banned")
	clearEnv(t)
	t.Setenv(envDatabaseURL, db.DSN)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var stderr strings.Builder
		done <- run(ctx, []string{"ui", "--addr", "127.0.0.1:0", "--max-age", "1h"}, nil, w, &stderr)
		w.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no line from runclaim ui: %v", err)
	}
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/) \(read-only\)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("runclaim ui said %q, want the address it serves and read-only", line)
	}
	go io.Copy(io.Discard, out)
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "avito") || strings.Contains(string(body), `method="post"`) {
		t.Errorf("GET /: %d, want the sources, read-only:\n%s", resp.StatusCode, body)
	}
	resp, err = http.Post(m[1]+"sources/avito/resume", "application/x-www-form-urlencoded", strings.NewReader("confirm=yes"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST resume to the read-only console: %d, want 403", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("runclaim ui exited %d after its context ended, want 0", code)
	}
}

// TestUIUsage: the flags that would expose actions are refused before
// anything connects.
func TestUIUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"ui", "--actions", "--addr", "0.0.0.0:8080"},
		{"ui", "--identity", "alice"},
		{"ui", "--addr", "nowhere"},
		{"ui", "--max-age", "-1h"},
	} {
		r := runCLI(t, nil, nil, args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, exitUsage, r.stderr)
		}
	}
}
