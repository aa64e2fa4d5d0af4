package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsumerModule builds and runs this program as a user's module
// would: from a module outside the repository whose go.mod requires ordo
// and replaces nothing but ordo itself (with this checkout). A replace
// directive ordo needed for one of its own dependencies would not apply
// there, so this is what proves `go get` works.
func TestConsumerModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from scratch")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module example.com/hello\n\ngo 1.26\n\nrequire github.com/ordo-actors/ordo v0.0.0\n\n" +
		"replace github.com/ordo-actors/ordo => " + root + "\n"
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s in the consumer module: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}
	run("mod", "tidy")
	if mod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); bytes.Count(mod, []byte("replace")) != 1 {
		t.Fatalf("the consumer needs more than ordo's own replace:\n%s", mod)
	}
	bin := filepath.Join(dir, "hello")
	run("build", "-o", bin, ".")
	cmd := exec.Command(bin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hello: %v\n%s", err, out)
	}
	if want := "hello, ordo: greeting 1 from greeter/world\n"; string(out) != want {
		t.Fatalf("hello printed %q, want %q", out, want)
	}
}
