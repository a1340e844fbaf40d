package lambdatest

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// envRunMain tells a test binary started by StartFunction to run the
// function's main instead of its tests.
const envRunMain = "ONCE_LAMBDATEST_RUN_MAIN"

// Main is the TestMain of a functions/<name> package: it runs the tests, or
// the function's main when the process was started by StartFunction, so that
// a test can run the function exactly as Lambda does (its real main, in a
// process of its own, against a RuntimeAPI).
//
//	func TestMain(m *testing.M) { lambdatest.Main(m, main) }
func Main(m *testing.M, main func()) {
	if os.Getenv(envRunMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Process is a function's main running in a process of its own.
type Process struct {
	cmd    *exec.Cmd
	stdout Buffer
	stderr Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// StartFunction starts the test binary's function main (see Main) with env
// as its only AWS_*, ONCE_*, DYNAMODB_*, SQS_* and LOG_LEVEL variables, and kills it
// when the test ends. Point it at a RuntimeAPI with AWS_LAMBDA_RUNTIME_API.
func StartFunction(t testing.TB, env map[string]string) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: exec.Command(exe), exited: make(chan struct{})}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") || strings.HasPrefix(name, "ONCE_") ||
			strings.HasPrefix(name, "DYNAMODB_") || strings.HasPrefix(name, "SQS_") || name == "LOG_LEVEL" {
			continue
		}
		p.cmd.Env = append(p.cmd.Env, kv)
	}
	p.cmd.Env = append(p.cmd.Env, envRunMain+"=1")
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the function: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// Wait waits up to timeout for the process to exit by itself and returns its
// exit code, failing t when it does not exit.
func (p *Process) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("the function did not exit within %v; stderr:\n%s", timeout, p.stderr.String())
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait for the function: %v", p.err)
	}
	return 0
}

// Stop kills the process (if it still runs) and returns every line it wrote
// to stdout and to stderr, failing t on any line that is not a JSON object:
// Lambda sends both to CloudWatch Logs, where the functions write JSON only.
// A data race reported by the race detector is such a line.
func (p *Process) Stop(t testing.TB) (stdout, stderr []map[string]any) {
	t.Helper()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return jsonLines(t, "stdout", p.stdout.String()), jsonLines(t, "stderr", p.stderr.String())
}

func jsonLines(t testing.TB, stream, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	bad := 0
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			if bad++; bad <= 20 {
				t.Errorf("the function wrote a line that is not JSON to %s: %q", stream, sc.Text())
			}
			continue
		}
		lines = append(lines, m)
	}
	if bad > 20 {
		t.Errorf("... and %d more lines that are not JSON on %s", bad-20, stream)
	}
	return lines
}

// CheckStartupFailure starts the function's main with env, which must keep
// it from starting, and checks that it exits with status 1 after writing
// only JSON lines, one of which is the reason naming each of mention.
func CheckStartupFailure(t testing.TB, env map[string]string, mention ...string) {
	t.Helper()
	p := StartFunction(t, env)
	if code := p.Wait(t, time.Minute); code != 1 {
		t.Errorf("exit status = %d, want 1", code)
	}
	stdout, stderr := p.Stop(t)
	var reasons []map[string]any
	for _, l := range append(stdout, stderr...) {
		if l["msg"] == "function cannot start" {
			reasons = append(reasons, l)
		}
	}
	if len(reasons) != 1 {
		t.Fatalf("%d lines say why the function cannot start, want 1; stdout %v, stderr %v", len(reasons), stdout, stderr)
	}
	reason, _ := reasons[0]["error"].(string)
	for _, m := range mention {
		if !strings.Contains(reason, m) {
			t.Errorf("the reason %q does not name %s", reason, m)
		}
	}
	if reasons[0]["level"] != "ERROR" {
		t.Errorf("the reason's level = %v, want ERROR", reasons[0]["level"])
	}
}
