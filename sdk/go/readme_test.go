package queuecore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeExamples runs every ```go block of README.md, in order, as a program of its own in a temporary
// module that uses this SDK (a replace directive), against the live server (the production key: the README
// has its environment to itself).
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) < 5 {
		t.Fatalf("found %d go blocks in README.md", len(blocks))
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	sdk, _ := filepath.Abs(".")
	dir := t.TempDir()
	mod := "module readmeexamples\n\ngo 1.21\n\nrequire github.com/queuecore/queuecore-go v0.0.0\n\n" +
		"replace github.com/queuecore/queuecore-go => " + sdk + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, code := range blocks {
		if !strings.HasPrefix(code, "package main\n") {
			t.Fatalf("README block %d is not a complete program (package main):\n%s", i+1, code)
		}
		pkg := filepath.Join(dir, fmt.Sprintf("example%02d", i+1))
		_ = os.MkdirAll(pkg, 0o755)
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The temporary module resolves its requirements like the SDK's test build, without the -modfile of it.
	env := append(os.Environ(), "GOFLAGS=-mod=mod -modcacherw")
	build := exec.Command(goBin, "build", "-o", filepath.Join(dir, "bin")+string(filepath.Separator), "./...")
	build.Dir, build.Env = dir, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the README's examples: %v\n%s", err, out)
	}
	for i := range blocks {
		name := fmt.Sprintf("example%02d", i+1)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		run := exec.CommandContext(ctx, filepath.Join(dir, "bin", name))
		run.Env = append(os.Environ(), "QUEUECORE_API_KEY="+keys["production"], "QUEUECORE_BASE_URL="+serverURL)
		out, err := run.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README example %d failed: %v\n--- program ---\n%s\n--- output ---\n%s", i+1, err, blocks[i], out)
		}
		t.Logf("README example %d:\n%s", i+1, out)
	}
}

func goBlocks(markdown string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(markdown, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}
