package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/provider/simulator"
)

// EnvRole set to "provider" makes the bench's command serve the provider
// simulator (ServeProvider) instead of measuring: StartProvider starts it
// so. Set to RoleDriver, it makes it the front door's driver
// (ServeDriver).
const EnvRole = "ONCE_BENCH_ROLE"

// providerReady prefixes the line ServeProvider prints once it listens.
const providerReady = "provider listening on "

// ServeProvider serves the provider simulator, configured from getenv as
// the provider function is (ONCE_PROVIDER_TABLE, DYNAMODB_ENDPOINT), on a
// free port of 127.0.0.1 until ctx ends, printing its URL on out first.
func ServeProvider(ctx context.Context, getenv func(string) string, out io.Writer) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: simulator.Handler(cfg, client, app.Options{}), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "%shttp://%s\n", providerReady, ln.Addr())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// StartProvider runs this executable with EnvRole=provider and env, waits
// for its URL and returns it, with a function that stops the process.
func StartProvider(ctx context.Context, env []string) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{EnvRole + "=provider"}, env...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), providerReady); ok {
				lines <- url
			}
		}
		close(lines)
	}()
	select {
	case url, ok := <-lines:
		if !ok {
			stop()
			return "", nil, errors.New("bench: the provider process ended before it listened")
		}
		return url, stop, nil
	case <-time.After(time.Minute):
		stop()
		return "", nil, errors.New("bench: the provider process did not listen within a minute")
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}
