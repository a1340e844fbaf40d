package ddblocal

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/dynamoclient"
)

// startTimeout is generous: under `make test` the JVM starts while every
// other package's tests load the machine's two cores.
const startTimeout = 3 * time.Minute

// cachedDir returns the cached emulator directory, skipping the test when it
// has not been fetched, or failing it under ONCE_REQUIRE_DYNAMODB=1.
func cachedDir(t *testing.T) string {
	t.Helper()
	dir, err := emulatorDir("")
	if err != nil {
		if os.Getenv("ONCE_REQUIRE_DYNAMODB") == "1" {
			t.Fatalf("ONCE_REQUIRE_DYNAMODB=1 but %v", err)
		}
		t.Skipf("%v", err)
	}
	needJava(t)
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeDir returns an emulator directory whose jar is not a jar.
func fakeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "DynamoDBLocal.jar"), []byte("not a jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func listTables(ctx context.Context, t *testing.T, endpoint string) (*dynamodb.ListTablesOutput, error) {
	t.Helper()
	cfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: endpoint})
	if err != nil {
		t.Fatalf("dynamoclient.Config: %v", err)
	}
	return dynamoclient.New(cfg, endpoint).ListTables(ctx, &dynamodb.ListTablesInput{})
}

func portOpen(t *testing.T, endpoint string) bool {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func TestStartStop(t *testing.T) {
	cachedDir(t)
	ctx := t.Context()
	// Dir is left empty: Start finds the cache from the package directory.
	s, err := Start(ctx, Options{Logger: testLogger(t), StartTimeout: startTimeout})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Stop() })
	if !strings.HasPrefix(s.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("Endpoint() = %q, want http://127.0.0.1:PORT", s.Endpoint())
	}

	out, err := listTables(ctx, t, s.Endpoint())
	if err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	if len(out.TableNames) != 0 {
		t.Errorf("ListTables on a new in-memory DynamoDB Local = %v, want none", out.TableNames)
	}

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if portOpen(t, s.Endpoint()) {
		t.Errorf("%s still accepts connections after Stop", s.Endpoint())
	}
	if s.cmd.ProcessState == nil {
		t.Errorf("process not reaped after Stop")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
}

func TestContextCancelStops(t *testing.T) {
	dir := cachedDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	ctx, cancel := context.WithCancel(t.Context())
	s, err := Start(ctx, Options{Dir: dir, Port: port, Logger: testLogger(t), StartTimeout: startTimeout})
	if err != nil {
		cancel()
		t.Fatalf("Start(Port: %d): %v", port, err)
	}
	t.Cleanup(func() { s.Stop() })
	if want := "http://" + hostPort(port); s.Endpoint() != want {
		t.Errorf("Endpoint() = %q, want %q", s.Endpoint(), want)
	}

	// A second server cannot take the same port.
	if s2, err := Start(t.Context(), Options{Dir: dir, Port: port}); err == nil {
		s2.Stop()
		t.Errorf("Start on the busy port %d succeeded, want an error", port)
	} else if !strings.Contains(err.Error(), "in use") {
		t.Errorf("Start on the busy port %d = %v, want an 'in use' error", port, err)
	}

	cancel()
	select {
	case <-s.done:
	case <-time.After(2 * defaultStopTimeout):
		t.Fatalf("DynamoDB Local still running %v after its context was cancelled", 2*defaultStopTimeout)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop after cancel = %v, want nil", err)
	}
	if portOpen(t, s.Endpoint()) {
		t.Errorf("%s still accepts connections after cancel", s.Endpoint())
	}
}

func TestStartMissingJar(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(t.Context(), Options{Dir: dir})
	if err == nil {
		t.Fatalf("Start(Dir: %s) succeeded, want an error", dir)
	}
	for _, want := range []string{dir, "scripts/dynamodb-local.sh fetch", "make run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start(Dir: %s) = %q, want it to mention %q", dir, err, want)
		}
	}
}

func TestStartReportsEarlyExit(t *testing.T) {
	needJava(t)
	_, err := Start(t.Context(), Options{Dir: fakeDir(t), StartTimeout: 30 * time.Second})
	if err == nil {
		t.Fatal("Start with a corrupt jar succeeded, want an error")
	}
	for _, want := range []string{"exited before answering", "jarfile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start with a corrupt jar = %q, want it to mention %q", err, want)
		}
	}
}

func TestStartPortInUse(t *testing.T) {
	needJava(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Start(t.Context(), Options{Dir: fakeDir(t), Port: port})
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Start(Port: %d) with the port taken = %v, want an 'in use' error", port, err)
	}
}

func TestOutputTail(t *testing.T) {
	o := &output{log: slog.New(slog.DiscardHandler)}
	for i := range keepLines + 5 {
		o.Write([]byte("line " + strings.Repeat("x", i%3) + "\n"))
	}
	o.Write([]byte("partial"))
	lines := strings.Split(o.tail(), "\n")
	if got, want := len(lines), keepLines+1; got != want {
		t.Errorf("tail has %d lines, want %d", got, want)
	}
	if got := lines[len(lines)-1]; got != "    partial" {
		t.Errorf("last tail line = %q, want %q", got, "    partial")
	}
	if got := (&output{log: slog.New(slog.DiscardHandler)}).tail(); !strings.Contains(got, "no output") {
		t.Errorf("tail of nothing = %q, want it to say no output", got)
	}
}

// needJava skips the test without Java, or fails it under
// ONCE_REQUIRE_DYNAMODB=1 (make test), where Java must be there.
func needJava(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		if os.Getenv("ONCE_REQUIRE_DYNAMODB") == "1" {
			t.Fatalf("ONCE_REQUIRE_DYNAMODB=1 but java is missing: %v", err)
		}
		t.Skipf("java: %v", err)
	}
}
