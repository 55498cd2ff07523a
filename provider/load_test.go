package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

func TestFiInfoListsXdpfab(t *testing.T) {
	dir := built(t)
	out := run(t, dir, "fi_info", "-p", "xdpfab", "-v")
	require.Contains(t, out, "prov_name: xdpfab")
	require.Contains(t, out, "type: FI_EP_RDM")
	require.Contains(t, out, "addr_format: FI_SOCKADDR_IN")
	// Without the directory on the path libfabric does not know xdpfab.
	cmd := exec.Command("fi_info", "-p", "xdpfab")
	cmd.Env = providerEnv("")
	require.Error(t, cmd.Run(), "fi_info found xdpfab without FI_PROVIDER_PATH")
}

func TestShimExportsOnlyFiProvIni(t *testing.T) {
	dir := built(t)
	out := run(t, "", "nm", "-D", "--defined-only", filepath.Join(dir, "libxdpfab-fi.so"))
	var syms []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		syms = append(syms, f[len(f)-1])
	}
	require.Equal(t, []string{"fi_prov_ini"}, syms)
}

// probeFacts parses the probe's "tag key=value ..." lines.
func probeFacts(t *testing.T, out, tag string) map[string]int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != tag {
			continue
		}
		m := map[string]int{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.Atoi(v)
			require.NoError(t, err, line)
			m[k] = n
		}
		return m
	}
	t.Fatalf("no %q line in probe output:\n%s", tag, out)
	return nil
}

// A process that asks only for tcp gets no Go runtime from an installed
// xdpfab: the same threads and signal handlers as without it.
func TestOtherProvidersGetNoRuntime(t *testing.T) {
	dir := built(t)
	probe := filepath.Join(dir, "probe")
	base := probeFacts(t, run(t, "", probe, "getinfo", "tcp"), "after")
	with := probeFacts(t, run(t, dir, probe, "getinfo", "tcp"), "after")
	require.Zero(t, with["ret"])
	require.Zero(t, with["go"], "libxdpfab-go.so was loaded")
	require.Equal(t, base, with)

	// fi_info -p tcp with xdpfab on the path, too: no Go part mapped.
	cmd := exec.Command("sh", "-c", `fi_info -p tcp >/dev/null & pid=$!; wait $pid`)
	cmd.Env = providerEnv(dir)
	require.NoError(t, cmd.Run())

	// The probe can tell: asking for xdpfab starts the runtime.
	x := probeFacts(t, run(t, dir, probe, "getinfo", "xdpfab"), "after")
	require.Zero(t, x["ret"])
	require.Equal(t, 1, x["go"])
	require.Greater(t, x["threads"], base["threads"])
	require.Equal(t, 1, x["sigurg"])
}

// Two copies of the provider (two shims, each with its own Go part beside
// it) share one Go runtime.
func TestTwoCopiesOneRuntime(t *testing.T) {
	dir := built(t)
	second := t.TempDir()
	for _, lib := range []string{"libxdpfab-fi.so", "libxdpfab-go.so"} {
		b, err := os.ReadFile(filepath.Join(dir, lib))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(second, lib), b, 0o644))
	}
	out := run(t, "", filepath.Join(dir, "probe"), "twoshims",
		filepath.Join(dir, "libxdpfab-fi.so"), filepath.Join(second, "libxdpfab-fi.so"))
	f := probeFacts(t, out, "twoshims")
	require.Zero(t, f["ret"], out)
	require.Equal(t, 1, f["go"], out)

	// Both directories on FI_PROVIDER_PATH: fi_info lists xdpfab once per
	// address, as with one.
	one := run(t, dir, "fi_info", "-p", "xdpfab")
	two := run(t, dir+":"+second, "fi_info", "-p", "xdpfab")
	require.Equal(t, one, two)
}

// fork: a child of a process using xdpfab cannot enter Go; it gets
// FI_ENODATA from xdpfab, other providers work, and the parent goes on.
func TestForkChild(t *testing.T) {
	dir := built(t)
	out := run(t, dir, filepath.Join(dir, "probe"), "fork")
	require.Contains(t, out, "child xdpfab="+strconv.Itoa(-int(fi.ENODATA))+" tcp=0", out)
	require.Contains(t, out, "child-status exited=1 code=0 signaled=0", out)
	require.Zero(t, probeFacts(t, out, "parent-after")["ret"], out)
}

func TestMaxProcs(t *testing.T) {
	require.Equal(t, 2, maxProcs("", ""), "two Ps, also for a rank bound to one CPU")
	require.Equal(t, 6, maxProcs("6", "3"))
	require.Equal(t, 3, maxProcs("x", "3"))
	require.Equal(t, 2, maxProcs("0", ""))
}

func TestCatchTurnsPanicIntoEOTHER(t *testing.T) {
	f := func() (ret int32) {
		defer catch(&ret)
		var m map[string]int
		m["x"]++ // panics
		return 0
	}
	require.Equal(t, int32(-fi.EOTHER), f())
}

// Every exported function recovers: its first statement is
// `defer catch(&ret)` (or, without a result, a deferred recover).
func TestEveryExportRecovers(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	export := regexp.MustCompile(`^//export `)
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Doc == nil || !export.MatchString(fd.Doc.List[len(fd.Doc.List)-1].Text) {
				continue
			}
			n++
			require.NotEmpty(t, fd.Body.List, fd.Name.Name)
			def, ok := fd.Body.List[0].(*ast.DeferStmt)
			require.True(t, ok, "%s: first statement is not a defer", fd.Name.Name)
			switch fn := def.Call.Fun.(type) {
			case *ast.Ident:
				require.Equal(t, "catch", fn.Name, fd.Name.Name)
			case *ast.IndexExpr:
				require.Equal(t, "catch", fn.X.(*ast.Ident).Name, fd.Name.Name)
			case *ast.FuncLit:
				require.Contains(t, exprString(fset, fn), "recover()", fd.Name.Name)
			default:
				t.Fatalf("%s: defers %T", fd.Name.Name, fn)
			}
		}
	}
	require.Greater(t, n, 3)
}

func exprString(fset *token.FileSet, n ast.Node) string {
	var b strings.Builder
	ast.Inspect(n, func(x ast.Node) bool {
		if c, ok := x.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok {
				b.WriteString(id.Name + "() ")
			}
		}
		return true
	})
	return b.String()
}
