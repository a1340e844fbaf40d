package ddblocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultDir is where `scripts/dynamodb-local.sh fetch` extracts DynamoDB
// Local, relative to the repository root.
const DefaultDir = ".cache/dynamodb-local/package/emulator"

const (
	defaultStartTimeout = 60 * time.Second
	defaultStopTimeout  = 10 * time.Second
	// bindAttempts bounds the retries when a port picked by Start is taken
	// by someone else before the JVM binds it.
	bindAttempts = 3
)

// Options configures Start.
type Options struct {
	// Dir is the extracted emulator directory, holding DynamoDBLocal.jar and
	// DynamoDBLocal_lib. Empty means DefaultDir in the working directory or
	// the nearest parent that has it.
	Dir string
	// Port is the loopback port to listen on; 0 picks a free one.
	Port int
	// Logger receives the lifecycle at Info and the JVM's output at Debug;
	// nil discards both.
	Logger *slog.Logger
	// StartTimeout bounds the wait for the server to answer (default 60s:
	// a JVM on a loaded two-core machine can take half a minute).
	StartTimeout time.Duration
	// StopTimeout bounds the wait after SIGTERM before SIGKILL (default 10s).
	StopTimeout time.Duration
}

// Server is a running DynamoDB Local.
type Server struct {
	ctx         context.Context
	cmd         *exec.Cmd
	endpoint    string
	log         *slog.Logger
	out         *output
	stopTimeout time.Duration

	done    chan struct{} // closed once the process has been reaped
	waitErr error         // cmd.Wait's result, set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// Start starts DynamoDB Local and returns once it answers HTTP requests. The
// server runs until Stop is called or ctx is done; the caller must call Stop.
// Start fails if Java or the cached jar is missing, if Port is taken, or if
// the server does not answer within StartTimeout.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = defaultStopTimeout
	}
	dir, err := emulatorDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("ddblocal: java not found (install Java 17, e.g. apt-get install openjdk-17-jre-headless): %w", err)
	}
	if opts.Port != 0 {
		if conn, err := net.DialTimeout("tcp", hostPort(opts.Port), time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("ddblocal: port %d is already in use", opts.Port)
		}
		return start(ctx, java, dir, opts.Port, opts)
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, java, dir, port, opts)
		if errors.Is(err, errPortTaken) && attempt < bindAttempts {
			opts.Logger.Info("dynamodb local: port taken, trying another", "port", port)
			continue
		}
		return s, err
	}
}

var errPortTaken = errors.New("port taken")

func start(ctx context.Context, java, dir string, port int, opts Options) (*Server, error) {
	began := time.Now()
	out := &output{log: opts.Logger}
	cmd := exec.CommandContext(ctx, java,
		"-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-inMemory", "-sharedDb", "-disableTelemetry",
		"-port", strconv.Itoa(port))
	// DynamoDB Local writes dynamodb-local-metadata.json into its working
	// directory: keep it in the cache, not wherever the devstack runs.
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = opts.StopTimeout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ddblocal: start java: %w", err)
	}
	s := &Server{
		ctx:         ctx,
		cmd:         cmd,
		endpoint:    "http://" + hostPort(port),
		log:         opts.Logger,
		out:         out,
		stopTimeout: opts.StopTimeout,
		done:        make(chan struct{}),
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	if err := s.waitReady(ctx, opts.StartTimeout); err != nil {
		s.Stop()
		return nil, err
	}
	s.log.Info("dynamodb local started", "endpoint", s.endpoint, "pid", cmd.Process.Pid,
		"dir", dir, "elapsed", time.Since(began).Round(time.Millisecond))
	return s, nil
}

// waitReady polls until the server answers an HTTP POST, the process exits,
// ctx is done or timeout passes.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			tail := s.out.tail()
			if strings.Contains(tail, "BindException") || strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("ddblocal: %s: %w", s.endpoint, errPortTaken)
			}
			return fmt.Errorf("ddblocal: DynamoDB Local exited before answering on %s (%v); its output:\n%s",
				s.endpoint, s.waitErr, tail)
		case <-ctx.Done():
			return fmt.Errorf("ddblocal: waiting for DynamoDB Local: %w", context.Cause(ctx))
		case <-deadline.C:
			return fmt.Errorf("ddblocal: DynamoDB Local did not answer on %s within %v; its output:\n%s",
				s.endpoint, timeout, s.out.tail())
		case <-tick.C:
			if answers(ctx, client, s.endpoint) {
				return nil
			}
		}
	}
}

// answers reports whether endpoint answers a DynamoDB request with any HTTP
// response (unsigned, so DynamoDB Local says 400 MissingAuthenticationToken).
func answers(ctx context.Context, client *http.Client, endpoint string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/", strings.NewReader("{}"))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return true
}

// Endpoint returns the server's base URL, http://127.0.0.1:PORT.
func (s *Server) Endpoint() string { return s.endpoint }

// PID returns the process ID of the emulator's JVM (a benchmark reads its
// CPU time).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop stops the server: SIGTERM, SIGKILL if it is still
// running after StopTimeout, then waits for it to be reaped. It is safe to
// call more than once; it returns an error only if the server had already
// died on its own.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	select {
	case <-s.done:
		if s.ctx.Err() != nil {
			return nil // stopped by the context, as asked
		}
		return fmt.Errorf("ddblocal: DynamoDB Local on %s had exited: %v; its output:\n%s",
			s.endpoint, s.waitErr, s.out.tail())
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(s.stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		s.log.Warn("dynamodb local ignored SIGTERM; killing it", "endpoint", s.endpoint, "after", s.stopTimeout)
		s.cmd.Process.Kill()
		<-s.done
	}
	s.log.Info("dynamodb local stopped", "endpoint", s.endpoint)
	return nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("ddblocal: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// emulatorDir resolves dir (see Options.Dir) and checks that it holds the jar.
func emulatorDir(dir string) (string, error) {
	if dir == "" {
		dir = findDefaultDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("ddblocal: %w", err)
	}
	if _, err := os.Stat(filepath.Join(abs, "DynamoDBLocal.jar")); err != nil {
		return "", fmt.Errorf("ddblocal: DynamoDB Local is not in %s: run `scripts/dynamodb-local.sh fetch` or `make run`", abs)
	}
	return abs, nil
}

// findDefaultDir returns DefaultDir in the working directory or the nearest
// parent that has DynamoDBLocal.jar there, else DefaultDir itself.
func findDefaultDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return DefaultDir
	}
	for d := wd; ; d = filepath.Dir(d) {
		candidate := filepath.Join(d, DefaultDir)
		if _, err := os.Stat(filepath.Join(candidate, "DynamoDBLocal.jar")); err == nil {
			return candidate
		}
		if filepath.Dir(d) == d {
			return DefaultDir
		}
	}
}

// output logs the JVM's output line by line and keeps its last lines for
// error messages.
type output struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte
	lines   []string
}

const keepLines = 30

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.add(string(bytes.TrimRight(o.partial[:i], "\r")))
		o.partial = o.partial[i+1:]
	}
	if len(o.partial) > 4096 { // a line with no end: keep memory bounded
		o.add(string(o.partial))
		o.partial = o.partial[:0]
	}
	return len(p), nil
}

func (o *output) add(line string) {
	o.log.Debug("dynamodb local", "output", line)
	o.lines = append(o.lines, line)
	if len(o.lines) > keepLines {
		o.lines = o.lines[len(o.lines)-keepLines:]
	}
}

// tail returns the last lines of output, indented for an error message.
func (o *output) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := o.lines
	if len(o.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(o.partial))
	}
	if len(lines) == 0 {
		return "    (no output)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
