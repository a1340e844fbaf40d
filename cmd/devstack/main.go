// Command devstack runs the service locally (`make run`): DynamoDB Local, the
// tables of template.yaml, demo API keys, and the API Gateway emulator in
// front of the authorizer and api Lambda handlers, on
// http://127.0.0.1:${PORT:-3000}. See internal/devstack.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/lambdamain"
)

func main() {
	// Lines of libraries (the AWS SDK's warnings, the log package) are JSON
	// on stdout too, as in the functions.
	lambdamain.Setup(os.Stdout)
	if err := run(context.Background(), os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run starts the stack and serves until SIGINT or SIGTERM, then shuts it
// down gracefully. A second signal kills the process at once.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	stack, err := devstack.Start(ctx, devstack.Options{Getenv: getenv, Output: stdout})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "devstack: serving on %s (Ctrl-C to stop)\n", stack.URL())
	waitErr := stack.Wait(ctx)
	stop() // from here a second signal terminates the process
	if waitErr == nil {
		fmt.Fprintln(stderr, "devstack: shutting down")
	}
	return errors.Join(waitErr, stack.Close())
}
