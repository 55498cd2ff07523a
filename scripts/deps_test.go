// Package scripts_test tests the machine setup behind README's commands:
// scripts/deps.sh (what `make test`, `make demo` and `make generate`
// install or name before they run) and the Makefile's test target.
package scripts_test

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repo is the repository root (go test runs in scripts/).
const repo = ".."

// writeFile writes an executable (mode 0755) or plain file under dir.
func writeFile(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command in the repository with env added to the
// environment and returns its combined output and exit error.
func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// exitCode is err's exit status (0 for nil); it fails on other errors.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

// TestDepsNamesWhatIsMissing: when it may not install (XDPFAB_NO_INSTALL,
// as for a user who is not root or has no apt-get), deps.sh fails and
// names each missing requirement of the targets asked for, and the
// apt-get command that installs them; nothing for other targets.
func TestDepsNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	list := writeFile(t, dir, "deps.txt", `# a comment
test,demo  here-pkg     cmd:sh
test       tool-pkg     cmd:xdpfab-test-no-such-tool
demo,test  header-pkg   file:/nonexistent/xdpfab-test.h
demo       other-pkg    cmd:xdpfab-test-other-tool
`, 0o644)
	out, err := run(t, []string{"XDPFAB_DEPS_FILE=" + list, "XDPFAB_NO_INSTALL=1", "GO=true"}, "sh", "scripts/deps.sh", "test")
	if code := exitCode(t, err); code != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", code, out)
	}
	for _, want := range []string{"tool-pkg(xdpfab-test-no-such-tool)", "header-pkg(/nonexistent/xdpfab-test.h)",
		"apt-get install tool-pkg header-pkg"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "here-pkg") || strings.Contains(out, "other-pkg") {
		t.Errorf("output names a requirement that is there, or of another target:\n%s", out)
	}

	// Everything there: silent success.
	writeFile(t, dir, "deps.txt", "test here-pkg cmd:sh\n", 0o644)
	out, err = run(t, []string{"XDPFAB_DEPS_FILE=" + list, "XDPFAB_NO_INSTALL=1", "GO=true"}, "sh", "scripts/deps.sh", "test")
	if err != nil || out != "" {
		t.Fatalf("with nothing missing: %v, output %q", err, out)
	}

	// No Go: named, with the version go.mod asks for.
	out, err = run(t, []string{"XDPFAB_DEPS_FILE=" + list, "GO=/nonexistent/go"}, "sh", "scripts/deps.sh", "test")
	if exitCode(t, err) != 1 || !strings.Contains(out, "no Go toolchain") || !strings.Contains(out, "install Go 1.") {
		t.Fatalf("without Go: %v, output:\n%s", err, out)
	}
}

// TestDepsInstallsWhatIsMissing: as root with apt-get, deps.sh installs
// the missing packages (here a stand-in apt-get on PATH that records its
// calls and provides the tool), runs the install of a script-built
// requirement, checks again and succeeds.
func TestDepsInstallsWhatIsMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("deps.sh installs only as root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	writeFile(t, bin, "apt-get", `#!/bin/sh
echo "apt-get $*" >>`+log+`
case " $* " in *" install "*)
	printf '#!/bin/sh\n' >`+bin+`/xdpfab-test-tool
	chmod +x `+bin+`/xdpfab-test-tool ;;
esac
`, 0o755)
	built := filepath.Join(dir, "built")
	build := writeFile(t, dir, "build.sh", `case $1 in
check) test -e `+built+` ;;
install) echo "build.sh install" >>`+log+`; touch `+built+` ;;
esac
`, 0o644)
	list := writeFile(t, dir, "deps.txt", "test tool-pkg cmd:xdpfab-test-tool\ntest fabtests-stand-in sh:"+build+"\n", 0o644)
	env := []string{"XDPFAB_DEPS_FILE=" + list, "GO=true", "PATH=" + bin + ":" + os.Getenv("PATH")}
	out, err := run(t, env, "sh", "scripts/deps.sh", "test")
	if err != nil {
		t.Fatalf("%v; output:\n%s", err, out)
	}
	calls, _ := os.ReadFile(log)
	got := strings.Split(strings.TrimSpace(string(calls)), "\n")
	want := []string{"apt-get -o DPkg::Lock::Timeout=300 update -qq",
		"apt-get -o DPkg::Lock::Timeout=300 install -y -qq tool-pkg", "build.sh install"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s\noutput:\n%s", calls, strings.Join(want, "\n"), out)
	}
	// Installed: the next run looks and does nothing.
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, env, "sh", "scripts/deps.sh", "test"); err != nil || out != "" {
		t.Fatalf("second run: %v, output %q", err, out)
	}
	if _, err := os.Stat(log); err == nil {
		t.Fatal("second run installed again")
	}
}

// TestMakeTestChecksDepsFirst: README's `make test` on a machine lacking a
// requirement stops before any test with the message that names it
// (before the fix it ran the suite, which failed deep in
// datapath/reliable with `exec: "nft": executable file not found`). GO is
// a stand-in that records what make asked of it.
func TestMakeTestChecksDepsFirst(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "go-calls")
	fakeGo := writeFile(t, dir, "go", "#!/bin/sh\necho \"$*\" >>"+calls+"\n[ \"$1\" = version ] && echo 'go version go1.99 linux/amd64'\nexit 0\n", 0o755)
	list := writeFile(t, dir, "deps.txt", "test nftables-stand-in cmd:xdpfab-test-no-nft\n", 0o644)
	out, err := run(t, []string{"XDPFAB_DEPS_FILE=" + list, "XDPFAB_NO_INSTALL=1", "MAKEFLAGS="},
		"make", "--no-print-directory", "GO="+fakeGo, "test")
	if exitCode(t, err) == 0 {
		t.Fatalf("make test succeeded without a requirement; output:\n%s", out)
	}
	if !strings.Contains(out, "nftables-stand-in(xdpfab-test-no-nft)") {
		t.Errorf("make test did not name what is missing:\n%s", out)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("make test ran go before its requirements were there: %q", b)
	}
}

// guardRun returns the -run pattern of the go test command that `make
// test` runs without -race, failing when there is none.
func guardRun(t *testing.T) *regexp.Regexp {
	t.Helper()
	out, err := run(t, []string{"MAKEFLAGS="}, "make", "-n", "--no-print-directory", "GO=go", "test")
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	runArg := regexp.MustCompile(`-run '([^']+)'`)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "go test ") && !strings.Contains(line, "-race") {
			if m := runArg.FindStringSubmatch(line); m != nil {
				return regexp.MustCompile(m[1])
			}
		}
	}
	t.Fatalf("make test runs no go test without -race:\n%s", out)
	return nil
}

// TestAllocGuardsRunWithoutRace: every test that counts allocations
// (testing.AllocsPerRun, runtime.ReadMemStats) and skips or shrinks under
// the race detector (raceEnabled) is run by `make test` without -race too:
// its name matches the -run pattern of that step. (TestDatapathAllocs
// failed unnoticed for as long as make test only ran under -race.)
func TestAllocGuardsRunWithoutRace(t *testing.T) {
	pattern := guardRun(t)
	fset := token.NewFileSet()
	var guards []string
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != repo {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			counts, race := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.SelectorExpr:
					if x.Sel.Name == "AllocsPerRun" || x.Sel.Name == "ReadMemStats" {
						counts = true
					}
				case *ast.Ident:
					if x.Name == "raceEnabled" {
						race = true
					}
				}
				return true
			})
			if counts {
				guards = append(guards, fn.Name.Name)
			}
			if counts && race && !pattern.MatchString(fn.Name.Name) {
				t.Errorf("%s (%s) counts allocations and skips under -race, but make test's run without -race (-run '%s') leaves it out",
					fn.Name.Name, path, pattern)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(guards) == 0 {
		t.Fatal("found no allocation guard at all")
	}
	for _, name := range []string{"TestDatapathAllocs", "TestInjectAllocs", "TestAuthKeyAllocs"} {
		if !pattern.MatchString(name) {
			t.Errorf("%s is not run without -race", name)
		}
	}
	t.Logf("allocation guards: %v", guards)
}
