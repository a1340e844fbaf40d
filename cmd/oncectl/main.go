// Command oncectl is the operator's view of a once deployment: it lists the
// records left UNKNOWN, the dead letters and the payments left pending,
// shows one record (never its raw key: its hash), re-announces a record to
// the reconciler, forgets an UNKNOWN record that can never be reconciled
// (a delete fenced on what it showed), sends dead letters back to their queue, hands pending
// payments to the worker's retrier, shows a payment's refund holds, lists the stale holds of every
// payment, and settles a stale one
// (a transaction fenced on the hold and on its key having no live record), and
// completes an order left for review with the charge an operator found at the
// provider (the order's own phases, completed as the reconciler does, fenced). It is configured like the functions, from the
// environment, and works against AWS, LocalStack and the devstack alike. See
// internal/operator, and `oncectl help`.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncehq/once/internal/operator"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run runs the command args until it ends or SIGINT or SIGTERM arrives, and
// returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return operator.Run(ctx, args, getenv, stdout, stderr)
}
