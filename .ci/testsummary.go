//go:build ignore

// Command testsummary reads `go test -json` output on stdin, prints each
// package's result (with the PostgreSQL server its tests ran on, as
// internal/pgtest reports it), the full output of every failed test, the
// skipped tests with their reasons, and a closing line
// "LABEL: N passed, N failed, N skipped". It exits non-zero if any test or
// package failed, nothing ran, or a check given by a flag fails.
//
//	go test -json ./... | go run .ci/testsummary.go -label 'PostgreSQL 18' -major 18 -need-db pkg1,pkg2
//
// Flags:
//
//	-label NAME   names the run in the closing line and in every failure and skip
//	-major N      every package that reports a PostgreSQL server must report major version N
//	-need-db LIST comma-separated packages that must each report a PostgreSQL server,
//	              that is, must have run at least one test against a database
//	-line FILE    also writes the closing line to FILE
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// serverPrefix starts the line internal/pgtest prints once it has a server:
// "pgtest: PostgreSQL 16.14 from image ...".
const serverPrefix = "pgtest: PostgreSQL "

func main() {
	label := flag.String("label", "tests", "name of this run")
	major := flag.Int("major", 0, "PostgreSQL major version every reporting package must report (0: any)")
	needDB := flag.String("need-db", "", "comma-separated packages that must report a PostgreSQL server")
	lineFile := flag.String("line", "", "file to write the closing line to")
	flag.Parse()
	tag := ""
	if *label != "tests" {
		tag = "[" + *label + "] "
	}

	var (
		passed, failed, skipped int
		pkgFailed               []string
		output                  = map[string]*strings.Builder{} // by package/test
		failedTests             []string
		skips                   []string
		servers                 = map[string]string{} // package -> server version
		problems                []string
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
			if v, ok := strings.CutPrefix(e.Output, serverPrefix); ok {
				v, _, _ = strings.Cut(v, " ")
				if old, seen := servers[e.Package]; seen && old != v {
					problems = append(problems, fmt.Sprintf("%s reported two servers, PostgreSQL %s and %s", e.Package, old, v))
				}
				servers[e.Package] = v
				if m, _, _ := strings.Cut(v, "."); *major != 0 && m != strconv.Itoa(*major) {
					problems = append(problems, fmt.Sprintf("%s ran on PostgreSQL %s, want %d", e.Package, v, *major))
				}
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				status := strings.ToUpper(e.Action)
				if e.Action == "fail" {
					pkgFailed = append(pkgFailed, e.Package)
					if b := output[key(e)]; b != nil {
						fmt.Print(b.String())
					}
				}
				on := ""
				if v := servers[e.Package]; v != "" {
					on = "  (PostgreSQL " + v + ")"
				}
				fmt.Printf("%-4s %s%s %.1fs%s\n", status, tag, e.Package, e.Elapsed, on)
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
				if strings.Contains(reason, "pgtest: no PostgreSQL server") {
					problems = append(problems, fmt.Sprintf("%s skipped for want of a database: %s", key(e), reason))
				}
				skips = append(skips, fmt.Sprintf("%s: %s", key(e), reason))
			}
		}
	}
	if *needDB != "" {
		for _, p := range strings.Split(*needDB, ",") {
			if p = strings.TrimSpace(p); p != "" && servers[p] == "" {
				problems = append(problems, fmt.Sprintf("%s ran no test on a database (no %q line)", p, strings.TrimSpace(serverPrefix)))
			}
		}
	}
	if len(failedTests) > 0 {
		fmt.Println("\nfailed tests:")
		for _, k := range failedTests {
			fmt.Println("--- FAIL " + tag + k)
			if b := output[k]; b != nil {
				fmt.Print(b.String())
			}
		}
	}
	if len(skips) > 0 {
		sort.Strings(skips)
		fmt.Println("\nskipped tests:")
		for _, s := range skips {
			fmt.Println("  " + tag + s)
		}
	}
	if len(problems) > 0 {
		fmt.Println("\nproblems:")
		for _, p := range problems {
			fmt.Println("  " + tag + p)
		}
	}
	versions := map[string]bool{}
	for _, v := range servers {
		versions[v] = true
	}
	on := ""
	if len(versions) > 0 {
		vs := make([]string, 0, len(versions))
		for v := range versions {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		on = fmt.Sprintf(" (server %s in %d packages)", strings.Join(vs, ", "), len(servers))
	}
	bad := failed > 0 || len(pkgFailed) > 0 || passed == 0 || len(problems) > 0
	verdict := "ok"
	if bad {
		verdict = "FAILED"
	}
	closing := fmt.Sprintf("%s: %d passed, %d failed, %d skipped%s: %s", *label, passed, failed, skipped, on, verdict)
	fmt.Println("\n" + closing)
	if *lineFile != "" {
		if err := os.WriteFile(*lineFile, []byte(closing+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if bad {
		os.Exit(1)
	}
}
