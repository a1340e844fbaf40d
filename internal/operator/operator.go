package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
)

// DynamoDB is the part of the DynamoDB client the tool uses;
// *dynamodb.Client implements it.
type DynamoDB interface {
	dynamo.Client
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
}

// SQS is the part of the SQS client the tool uses; *sqs.Client implements
// it.
type SQS interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// Tool runs the operator's commands against one deployment.
type Tool struct {
	cfg    config.Config
	db     DynamoDB
	sqs    SQS
	store  *dynamo.Store
	out    io.Writer
	errOut io.Writer
	now    func() time.Time
	// scanPages bounds a listing's Scan (maxScanPages).
	scanPages int
	// scanLimit, when positive, is the Limit of each page of a listing's
	// Scan (tests make pages small); else a page is up to 1 MB.
	scanLimit int32
}

// New returns a Tool for the deployment cfg describes, reached through db
// and q, printing to out (results) and errOut (usage, counts).
func New(cfg config.Config, db DynamoDB, q SQS, out, errOut io.Writer) *Tool {
	return &Tool{
		cfg: cfg, db: db, sqs: q, store: dynamo.New(db, cfg.Table("IdempotencyTable")), out: out, errOut: errOut, now: time.Now,
		scanPages: maxScanPages,
	}
}

// WithClock makes t read the time from now instead of time.Now (a test's
// clock, moved forward), and returns t.
func (t *Tool) WithClock(now func() time.Time) *Tool {
	t.now = now
	return t
}

// usage is the tool's help.
const usage = `oncectl: the operator's view of a once deployment.

Configured like the functions, from the environment: DYNAMODB_ENDPOINT and
SQS_ENDPOINT (unset: AWS), AWS_REGION, ONCE_IDEMPOTENCY_TABLE,
ONCE_PAYMENTS_TABLE, ONCE_REFUNDS_TABLE, ONCE_ORDERS_TABLE,
ONCE_OUTBOX_TABLE, ONCE_CHECK_QUEUE, ONCE_CHECK_DLQ,
ONCE_WORKER_RETRY_QUEUE, ONCE_WORKER_RETRY_DLQ, ONCE_WORKER_RETRY_WINDOW,
ONCE_RECEIPT_RETRY_QUEUE, ONCE_RECEIPT_RETRY_DLQ, ONCE_RETENTION (queue
names or URLs; AWS credentials as the AWS SDK finds them); settle-order
reads ONCE_PROVIDER_KEY_RETENTION, and calls the payment provider as the api
does (ONCE_PROVIDER_URL, ONCE_PROVIDER_AUTH, ONCE_PROVIDER_TIMEOUT): to look
the order's key up and, -not-charged, to charge it.

Commands:
  unknown [-tenant T] [-limit N] [-json]       list the UNKNOWN records
  show [-bodies] (RECORD | -tenant T -key K)   show one record (never the raw key: its hash)
  reannounce (RECORD | -tenant T -key K)       hand a record to the reconciler again
  reannounce -lost [-tenant T] [-limit N]      hand every UNKNOWN record no check is armed for
                                               (check lost, or a TTL from before the upgrade) to it again
  forget [-confirm LEASE] (RECORD | -tenant T -key K)
                                               delete an UNKNOWN record for good (fenced)
  dlq list [QUEUE] [-limit N] [-json]          list dead letters
  dlq redrive QUEUE (ID... | -all)             send dead letters back to their queue
  pending [-tenant T] [-older-than D] [-limit N] [-json]
                                               list the payments still pending
  requeue-payment PAYMENT...                   hand pending payments to the retrier
  holds (PAYMENT | -tenant T -payment P)       show a payment's refund holds, and which are stale
  holds -stale [-all] [-tenant T] [-older-than D] [-limit N] [-json]
                                               list the stale holds of every payment, and what to run next
  settle-hold (release | refunded -provider-refund ID) -hold HASH [-no-record] [-confirm AMOUNT]
      (PAYMENT | -tenant T -payment P)         settle a stale hold as the provider says (fenced)
  settle-order (-charged CHARGE | -declined CHARGE -failure-code CODE | -not-charged)
      [-confirm LEASE] [-json] (RECORD | -tenant T -key K)
                                               complete an UNKNOWN order (order_needs_review) as the provider says,
                                               through the order's own phases (fenced)

RECORD is a record's ID, tenant#key-hash, as unknown lists them. QUEUE is
check, worker-retry or receipt-retry. PAYMENT is tenant#pay_id, as pending
lists them. HASH is a hold's key hash, as holds shows it.
`

// Run runs the command args and returns the process's exit code: 0, 1 when
// the command failed, 2 for a usage error.
func Run(ctx context.Context, args []string, getenv func(string) string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(errOut, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cfg, err := config.FromEnv(getenv)
	if err := errors.Join(err, config.CheckTables(getenv, "IdempotencyTable", "PaymentsTable", "RefundsTable", "OrdersTable", "OutboxTable")); err != nil {
		fmt.Fprintln(errOut, "oncectl:", err)
		return 2
	}
	db, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		fmt.Fprintln(errOut, "oncectl:", err)
		return 1
	}
	// Receives long-poll for a second or two; the client waits for them.
	q, err := queue.Client(ctx, cfg, queue.ClientOptions{Timeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintln(errOut, "oncectl:", err)
		return 1
	}
	return New(cfg, db, q, out, errOut).Run(ctx, args)
}

// Run runs the command args (as Run does, with the Tool's clients).
func (t *Tool) Run(ctx context.Context, args []string) int {
	commands := map[string]func(context.Context, []string) error{
		"unknown":         t.unknown,
		"show":            t.show,
		"reannounce":      t.reannounce,
		"forget":          t.forget,
		"dlq":             t.dlq,
		"pending":         t.pending,
		"requeue-payment": t.requeuePayment,
		"holds":           t.holds,
		"settle-hold":     t.settleHold,
		"settle-order":    t.settleOrder,
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(t.errOut, "oncectl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:])
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(t.errOut, "oncectl %s: %s\n", ue.fs.Name(), ue.msg)
		ue.fs.Usage()
		return 2
	case errors.As(err, new(flagError)):
		return 2 // the flag set printed the error and the usage
	case err != nil:
		fmt.Fprintf(t.errOut, "oncectl %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// usageError is a command used wrongly.
type usageError struct {
	fs  *flag.FlagSet
	msg string
}

func (e usageError) Error() string { return e.msg }

// flags returns a command's flag set, printing its usage to errOut.
func (t *Tool) flags(name, synopsis, what string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(t.errOut)
	fs.Usage = func() {
		fmt.Fprintf(t.errOut, "usage: oncectl %s %s\n%s\n", name, synopsis, what)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, flags first or mixed with the arguments, and checks
// that there are n arguments (any number when n < 0).
func (t *Tool) parse(fs *flag.FlagSet, args []string, n int) error {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return parseError(err)
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if err := fs.Parse(append([]string{"--"}, rest...)); err != nil {
		return parseError(err)
	}
	if n >= 0 && fs.NArg() != n {
		return usageError{fs, fmt.Sprintf("want %d argument(s), got %d: %s", n, fs.NArg(), strings.Join(fs.Args(), " "))}
	}
	return nil
}

// flagError is a flag the command's flag set could not parse (a usage
// error): the flag set printed it, with the usage.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }

// parseError is fs.Parse's error err as a flagError; -h and -help stay
// flag.ErrHelp.
func parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return flagError{err}
}
