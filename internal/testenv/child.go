package testenv

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// Child is the test binary re-executed to run one test as a helper
// process (a peer, an owner to kill, a holder of something): its stdout
// is piped to the test, its stderr goes to the test's, and its stdin is a
// pipe the test may close to tell it to finish.
type Child struct {
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Stdout io.Reader
}

// StartChild starts the test binary running only test, with env
// (KEY=VALUE) added to the environment, which the test reads to act as
// the child. The child is killed at cleanup if it is still running.
func StartChild(tb testing.TB, test string, env ...string) *Child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return &Child{Cmd: cmd, Stdin: stdin, Stdout: stdout}
}
