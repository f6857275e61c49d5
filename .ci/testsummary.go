//go:build ignore

// Command testsummary reads `go test -json` output on stdin, prints each
// package's result, the full output of every failed test, the skipped tests
// with their reasons, and a closing line "N passed, N failed, N skipped".
// It exits non-zero if any test or package failed, or nothing ran.
//
//	go test -json ./... | go run .ci/testsummary.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var (
		passed, failed, skipped int
		pkgFailed               []string
		output                  = map[string]*strings.Builder{} // by package/test
		failedTests             []string
		skips                   []string
	)
	key := func(e event) string { return e.Package + " " + e.Test }
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Println(string(line)) // build errors and the like
			continue
		}
		switch e.Action {
		case "output":
			b := output[key(e)]
			if b == nil {
				b = &strings.Builder{}
				output[key(e)] = b
			}
			b.WriteString(e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				status := strings.ToUpper(e.Action)
				if e.Action == "fail" {
					pkgFailed = append(pkgFailed, e.Package)
					if b := output[key(e)]; b != nil {
						fmt.Print(b.String())
					}
				}
				fmt.Printf("%-4s %s %.1fs\n", status, e.Package, e.Elapsed)
				continue
			}
			switch e.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				failedTests = append(failedTests, key(e))
			case "skip":
				skipped++
				reason := ""
				if b := output[key(e)]; b != nil {
					for _, l := range strings.Split(b.String(), "\n") {
						if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- SKIP") {
							reason = t
						}
					}
				}
				skips = append(skips, fmt.Sprintf("%s: %s", key(e), reason))
			}
		}
	}
	if len(failedTests) > 0 {
		fmt.Println("\nfailed tests:")
		for _, k := range failedTests {
			fmt.Println("--- FAIL", k)
			if b := output[k]; b != nil {
				fmt.Print(b.String())
			}
		}
	}
	if len(skips) > 0 {
		sort.Strings(skips)
		fmt.Println("\nskipped tests:")
		for _, s := range skips {
			fmt.Println("  " + s)
		}
	}
	fmt.Printf("\ntests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || len(pkgFailed) > 0 || passed == 0 {
		os.Exit(1)
	}
}
