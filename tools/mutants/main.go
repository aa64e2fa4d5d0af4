// Command mutants checks that ordo's tests notice a broken safety guard.
//
// For each mutation in mutants.go it copies the repository to a scratch
// directory (never touching the working tree), replaces one exact snippet
// of one file, runs the tests of the packages that own the guard, and
// reports the mutant killed (a test failed) or surviving (every test
// passed). A mutation whose snippet is not found exactly once, or whose
// mutated code does not build, is an ERROR, so that drift in the guarded
// code shows. It exits 1 if any mutant survives or errs.
//
//	go run ./tools/mutants              # every mutant (make mutants)
//	go run ./tools/mutants -run actors/ # those whose name matches
//	go run ./tools/mutants -list        # list them and check the snippets
//
// Mutants whose tests need a server (Needs, e.g. ORDO_PG_URL) are ERRORs
// when its variable is unset. The tests run without -race unless -race.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Mutant is one guard mutation.
type Mutant struct {
	// Name identifies the mutant ("package/guard").
	Name string
	// Guard says what the mutated code guarantees.
	Guard string
	// File is the mutated file, relative to the repository root.
	File string
	// Orig is an exact snippet of File, found exactly once; Repl replaces it.
	Orig, Repl string
	// Pkgs are the packages (relative to the root) whose tests must fail.
	Pkgs []string
	// Needs lists environment variables the tests need to run at all.
	Needs []string
}

// Outcome of one mutant.
const (
	Killed    = "killed"
	Surviving = "SURVIVING"
	Error     = "ERROR"
)

type result struct {
	m       Mutant
	outcome string
	detail  string
	took    time.Duration
	output  string
}

func main() {
	var (
		runRE   = flag.String("run", "", "run only mutants whose name matches this regexp")
		list    = flag.Bool("list", false, "list the mutants, check their snippets, and exit")
		jobs    = flag.Int("j", 1, "mutants tested at once (each in its own scratch copy)")
		timeout = flag.Duration("timeout", 10*time.Minute, "go test -timeout for each mutant")
		race    = flag.Bool("race", false, "run the tests with -race")
		verbose = flag.Bool("v", false, "print the test output of surviving and failed mutants")
		keep    = flag.Bool("keep", false, "keep the scratch copies")
	)
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fatalf("%v", err)
	}
	selected, err := selectMutants(*runRE)
	if err != nil {
		fatalf("%v", err)
	}
	if *list {
		bad := 0
		for _, m := range selected {
			status := "ok"
			if err := check(root, m); err != nil {
				status, bad = "ERROR: "+err.Error(), bad+1
			}
			fmt.Printf("%-32s %-34s %s\n", m.Name, m.File, status)
		}
		if bad > 0 {
			os.Exit(1)
		}
		return
	}

	start := time.Now()
	results := make([]result, len(selected))
	work := make(chan int)
	var wg sync.WaitGroup
	var printMu sync.Mutex
	for w := 0; w < max(*jobs, 1); w++ {
		scratch, err := os.MkdirTemp("", "ordo-mutants-")
		if err != nil {
			fatalf("%v", err)
		}
		if err := copyTree(root, scratch); err != nil {
			fatalf("copying the repository: %v", err)
		}
		if !*keep {
			defer os.RemoveAll(scratch)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := runMutant(root, scratch, selected[i], *timeout, *race)
				results[i] = r
				printMu.Lock()
				fmt.Printf("%-9s %-32s %6.1fs  %s\n", r.outcome, r.m.Name, r.took.Seconds(), r.detail)
				printMu.Unlock()
			}
		}()
	}
	fmt.Printf("%d mutants, %d at a time, scratch copies of %s\n", len(selected), max(*jobs, 1), root)
	for i := range selected {
		work <- i
	}
	close(work)
	wg.Wait()

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tOUTCOME\tTIME\tFILE\tDETAIL")
	counts := map[string]int{}
	for _, r := range results {
		counts[r.outcome]++
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%s\t%s\n", r.m.Name, r.outcome, r.took.Seconds(), r.m.File, r.detail)
	}
	tw.Flush()
	fmt.Printf("\n%d killed, %d surviving, %d errors in %s\n",
		counts[Killed], counts[Surviving], counts[Error], time.Since(start).Round(time.Second))
	if *verbose {
		for _, r := range results {
			if r.outcome != Killed && r.output != "" {
				fmt.Printf("\n==== %s (%s)\n%s\n", r.m.Name, r.outcome, r.output)
			}
		}
	}
	if counts[Surviving] > 0 || counts[Error] > 0 {
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mutants: "+format+"\n", args...)
	os.Exit(2)
}

func selectMutants(expr string) ([]Mutant, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	seen := map[string]bool{}
	var out []Mutant
	for _, m := range mutants {
		if seen[m.Name] {
			return nil, fmt.Errorf("mutant %q listed twice", m.Name)
		}
		seen[m.Name] = true
		if re.MatchString(m.Name) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no mutant matches %q", expr)
	}
	return out, nil
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module; run from the repository")
	}
	return filepath.Dir(mod), nil
}

// check reports why m cannot be applied to the tree at root, if it cannot.
func check(root string, m Mutant) error {
	src, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		return err
	}
	switch n := bytes.Count(src, []byte(m.Orig)); {
	case m.Orig == "":
		return errors.New("empty snippet")
	case n == 0:
		return errors.New("snippet not found (the guarded code changed: update the mutation)")
	case n > 1:
		return fmt.Errorf("snippet found %d times (make it unique)", n)
	}
	for _, v := range m.Needs {
		if os.Getenv(v) == "" {
			return fmt.Errorf("needs %s (see .ci/run)", v)
		}
	}
	return nil
}

// runMutant applies m in scratch, runs its packages' tests and restores
// the file.
func runMutant(root, scratch string, m Mutant, timeout time.Duration, race bool) (r result) {
	start := time.Now()
	r.m = m
	defer func() { r.took = time.Since(start) }()
	if err := check(root, m); err != nil {
		r.outcome, r.detail = Error, err.Error()
		return r
	}
	orig, err := os.ReadFile(filepath.Join(root, m.File))
	if err != nil {
		r.outcome, r.detail = Error, err.Error()
		return r
	}
	path := filepath.Join(scratch, m.File)
	mutated := bytes.Replace(orig, []byte(m.Orig), []byte(m.Repl), 1)
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		r.outcome, r.detail = Error, err.Error()
		return r
	}
	defer func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			fatalf("restoring %s in the scratch copy: %v", path, err)
		}
	}()

	args := []string{"test", "-count=1", "-timeout", timeout.String()}
	if race {
		args = append(args, "-race")
	}
	args = append(args, m.Pkgs...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = scratch
	out, err := cmd.CombinedOutput()
	r.output = string(out)
	var exit *exec.ExitError
	switch {
	case err == nil:
		r.outcome, r.detail = Surviving, "every test of "+strings.Join(m.Pkgs, " ")+" passed"
	case strings.Contains(r.output, "[build failed]") || strings.Contains(r.output, "[setup failed]"):
		r.outcome, r.detail = Error, "the mutated code does not build: "+firstLine(r.output, buildErrorRE)
	case errors.As(err, &exit):
		r.outcome, r.detail = Killed, firstFailure(r.output)
	default:
		r.outcome, r.detail = Error, err.Error()
	}
	return r
}

var (
	failRE       = regexp.MustCompile(`(?m)^--- FAIL: (\S+)`)
	panicRE      = regexp.MustCompile(`(?m)^panic: .*|^fatal error: .*|^FAIL\s.*`)
	errorRE      = regexp.MustCompile(`(?m)^\s+Error:\s+(.*)$`)
	messagesRE   = regexp.MustCompile(`(?m)^\s+Messages:\s+(.*)$`)
	logRE        = regexp.MustCompile(`(?m)^\s+\S+\.go:\d+: (\S.*)$`)
	buildErrorRE = regexp.MustCompile(`(?m)^\S+\.go:\d+:\d+: .*$`)
	lineStartRE  = regexp.MustCompile(`(?m)^\S`)
)

// firstFailure summarises why the tests failed: the failing top-level
// tests and the first one's failure message (testify's Error and Messages,
// else its last log line, which is where t.Fatal's message goes).
func firstFailure(out string) string {
	var tests []string
	for _, m := range failRE.FindAllStringSubmatch(out, -1) {
		tests = append(tests, m[1])
	}
	if len(tests) == 0 {
		return firstLine(out, panicRE)
	}
	// Without -v a test's output follows its --- FAIL line, up to the next
	// line that starts in the first column.
	block := out[failRE.FindStringIndex(out)[1]:]
	if end := lineStartRE.FindStringIndex(block); end != nil {
		block = block[:end[0]]
	}
	var msg string
	if m := errorRE.FindStringSubmatch(block); m != nil {
		msg = m[1]
		if mm := messagesRE.FindStringSubmatch(block); mm != nil {
			msg += ": " + mm[1]
		}
	} else if ms := logRE.FindAllStringSubmatch(block, -1); ms != nil {
		msg = ms[len(ms)-1][1]
	}
	return "FAIL " + strings.Join(tests, ",") + ": " + truncate(strings.TrimSpace(msg), 200)
}

func firstLine(out string, re *regexp.Regexp) string {
	return truncate(strings.TrimSpace(re.FindString(out)), 200)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// copyTree copies the repository at src to dst, without .git and build
// outputs.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "results":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".test") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
}
