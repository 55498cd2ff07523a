package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// The provider libraries and the C probe, built once per test binary
// (scripts/build-provider.sh) into a directory TestMain removes.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	buildLog  []byte
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// goCommand is the go command that built this test (GO overrides).
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// built returns the directory holding libxdpfab-fi.so, libxdpfab-go.so
// and the C programs of testdata, building them the first time. It skips
// when libfabric-dev or gcc is missing (fails with XDPFAB_REQUIRE_PRIV=1).
func built(t testing.TB) string {
	t.Helper()
	_, err := os.Stat("/usr/include/rdma/providers/fi_prov.h")
	testenv.RequireTool(t, err != nil, "libfabric-dev is not installed (.ci/run installs it)")
	_, err = exec.LookPath("gcc")
	testenv.RequireTool(t, err != nil, "gcc is not installed")
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "xdpfab-provider-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("sh", "../scripts/build-provider.sh", buildDir)
		cmd.Env = append(os.Environ(), "GO="+goCommand())
		if buildLog, buildErr = cmd.CombinedOutput(); buildErr != nil {
			return
		}
		for _, prog := range []string{"probe", "cqring", "reopen", "waitpoll", "setname"} {
			cmd := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", filepath.Join(buildDir, prog),
				filepath.Join("testdata", prog+".c"), "-lfabric", "-ldl", "-lpthread")
			var out []byte
			if out, buildErr = cmd.CombinedOutput(); buildErr != nil {
				buildLog = out
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("building the provider: %v\n%s", buildErr, buildLog)
	}
	return buildDir
}

// run runs a program with FI_PROVIDER_PATH=path (unset when empty) and
// returns its output, failing the test when it fails.
func run(t *testing.T, providerPath string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = providerEnv(providerPath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out.String())
	}
	return out.String()
}

func providerEnv(providerPath string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !bytes.HasPrefix([]byte(kv), []byte("FI_PROVIDER")) {
			env = append(env, kv)
		}
	}
	if providerPath != "" {
		env = append(env, "FI_PROVIDER_PATH="+providerPath)
	}
	return env
}
