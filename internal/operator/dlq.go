package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
)

// holdFor (seconds) hides the messages a scan received until the scan
// releases them (or, should it stop early, until then). A variable for the
// tests, which shorten it to outlast it.
var holdFor int32 = 30

// maxScan bounds the messages one scan receives.
const maxScan = 10000

// deadLetters is a dead-letter queue and the queue its messages come from.
type deadLetters struct {
	name        string // as the commands name it
	dlq, source string // names or URLs, from the configuration
	dlqEnv      string
	sourceEnv   string
}

// queues are the dead-letter queues the tool knows: those with a redrive
// policy. (The stream mappings' on-failure queues hold stream coordinates,
// not messages to send back: re-announce the records instead.)
func (t *Tool) queues() []deadLetters {
	return []deadLetters{
		{name: "check", dlq: t.cfg.CheckDLQ, source: t.cfg.CheckQueue, dlqEnv: config.EnvCheckDLQ, sourceEnv: config.EnvCheckQueue},
		{name: "worker-retry", dlq: t.cfg.WorkerRetryDLQ, source: t.cfg.WorkerRetryQueue, dlqEnv: config.EnvWorkerRetryDLQ, sourceEnv: config.EnvWorkerRetryQueue},
		{name: "receipt-retry", dlq: t.cfg.ReceiptRetryDLQ, source: t.cfg.ReceiptRetryQueue, dlqEnv: config.EnvReceiptRetryDLQ, sourceEnv: config.EnvReceiptRetryQueue},
	}
}

// queueChoice names the queues for usage messages: "a, b or c".
func (t *Tool) queueChoice() string {
	qs := t.queues()
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (t *Tool) queueNamed(name string) (deadLetters, bool) {
	for _, q := range t.queues() {
		if q.name == name {
			return q, true
		}
	}
	return deadLetters{}, false
}

// dlq runs the dlq subcommands.
func (t *Tool) dlq(ctx context.Context, args []string) error {
	fs := t.flags("dlq", "(list | redrive) ...", "List dead letters, or send them back to their queue.")
	if len(args) == 0 {
		return usageError{fs, "want list or redrive"}
	}
	switch args[0] {
	case "list":
		return t.dlqList(ctx, args[1:])
	case "redrive":
		return t.dlqRedrive(ctx, args[1:])
	}
	return usageError{fs, fmt.Sprintf("unknown subcommand %q: want list or redrive", args[0])}
}

// letter is a dead letter as listed.
type letter struct {
	Queue    string    `json:"queue"`
	ID       string    `json:"message_id"`
	Sent     time.Time `json:"sent"`
	Receives int       `json:"receives"`
	Body     string    `json:"body"`
	receipt  string
}

func (t *Tool) dlqList(ctx context.Context, args []string) error {
	fs := t.flags("dlq list", "[check|worker-retry|receipt-retry] [-limit N] [-json]", "List the dead letters of one queue, or of all.")
	limit := fs.Int("limit", 100, "list at most this many per queue")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	qs := t.queues()
	switch {
	case fs.NArg() == 1:
		q, ok := t.queueNamed(fs.Arg(0))
		if !ok {
			return usageError{fs, fmt.Sprintf("unknown queue %q: want %s", fs.Arg(0), t.queueChoice())}
		}
		qs = []deadLetters{q}
	case fs.NArg() > 1:
		return usageError{fs, "want at most one queue"}
	}
	var all []letter
	for _, q := range qs {
		url, err := queue.Resolve(ctx, t.sqs, q.dlq)
		if err != nil {
			return fmt.Errorf("%s: %w", q.dlqEnv, err)
		}
		letters, err := t.scan(ctx, q.name, url, func(got []letter) bool { return len(got) >= *limit })
		if err != nil {
			return err
		}
		// A listing leaves the messages where they are.
		if err := t.release(ctx, url, letters); err != nil {
			return err
		}
		if len(letters) > *limit {
			letters = letters[:*limit]
		}
		all = append(all, letters...)
	}
	if *asJSON {
		for _, l := range all {
			if err := t.writeJSON(l); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(t.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "QUEUE\tMESSAGE\tSENT\tRECEIVES\tBODY")
	for _, l := range all {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", l.Queue, l.ID, l.Sent.Format(time.RFC3339), l.Receives, l.Body)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(t.errOut, "%d dead letter(s)\n", len(all))
	return nil
}

func (t *Tool) dlqRedrive(ctx context.Context, args []string) error {
	fs := t.flags("dlq redrive", "(check|worker-retry|receipt-retry) (MESSAGE-ID... | -all)",
		"Send dead letters back to the queue they came from, where their function handles them again (idempotently).")
	all := fs.Bool("all", false, "every dead letter of the queue")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{fs, "want a queue: " + t.queueChoice()}
	}
	q, ok := t.queueNamed(fs.Arg(0))
	if !ok {
		return usageError{fs, fmt.Sprintf("unknown queue %q: want %s", fs.Arg(0), t.queueChoice())}
	}
	ids := fs.Args()[1:]
	if *all == (len(ids) > 0) {
		return usageError{fs, "want message IDs or -all, not both"}
	}
	dlq, err := queue.Resolve(ctx, t.sqs, q.dlq)
	if err != nil {
		return fmt.Errorf("%s: %w", q.dlqEnv, err)
	}
	source, err := queue.Resolve(ctx, t.sqs, q.source)
	if err != nil {
		return fmt.Errorf("%s: %w", q.sourceEnv, err)
	}
	wanted := map[string]bool{}
	for _, id := range ids {
		wanted[id] = true
	}
	letters, err := t.scan(ctx, q.name, dlq, func(got []letter) bool {
		if *all {
			return false
		}
		n := 0
		for _, l := range got {
			if wanted[l.ID] {
				n++
			}
		}
		return n == len(wanted)
	})
	if err != nil {
		return err
	}
	var keep, moved []letter
	var errs []error
	for _, l := range letters {
		if !*all && !wanted[l.ID] {
			keep = append(keep, l)
			continue
		}
		delete(wanted, l.ID)
		// Sent first, then deleted: a failure in between leaves a
		// duplicate, which the queue's consumer handles idempotently.
		if _, err := t.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(source), MessageBody: aws.String(l.Body)}); err != nil {
			errs = append(errs, fmt.Errorf("send %s back: %w", l.ID, err))
			keep = append(keep, l)
			continue
		}
		if _, err := t.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlq), ReceiptHandle: aws.String(l.receipt)}); err != nil {
			errs = append(errs, fmt.Errorf("delete %s from the dead-letter queue (it was sent back): %w", l.ID, err))
		}
		moved = append(moved, l)
	}
	errs = append(errs, t.release(ctx, dlq, keep))
	for _, l := range moved {
		fmt.Fprintf(t.out, "%s: %s sent back to %s\n", q.name, l.ID, queue.Name(source))
	}
	missing := slices.Sorted(func(yield func(string) bool) {
		for id := range wanted {
			if !yield(id) {
				return
			}
		}
	})
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("no dead letter %v in %s", missing, queue.Name(dlq)))
	}
	return errors.Join(errs...)
}

// scan receives the messages of the queue at url, hiding each for holdFor
// seconds, until the queue has no more or done returns true for those
// received; the caller releases or deletes them. They are sorted by the time
// they were sent, each once.
//
// A scan that outlasts holdFor (a queue of thousands of messages, read 10 at
// a time) receives its first messages again: such a repeat keeps its one
// letter, with its latest receipt handle (the only one SQS still honours),
// and a receive that brings nothing new ends the scan, which would otherwise
// cycle through the same messages up to maxScan and redrive each many
// times. What that scan did not reach is listed, or redriven, by the next
// one; a warning says so.
func (t *Tool) scan(ctx context.Context, name, url string, done func([]letter) bool) ([]letter, error) {
	var out []letter
	index := map[string]int{}
	for received := 0; received < maxScan; {
		resp, err := t.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			VisibilityTimeout:           holdFor,
			WaitTimeSeconds:             1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			_ = t.release(ctx, url, out)
			return nil, fmt.Errorf("receive from %s: %w", queue.Name(url), err)
		}
		if len(resp.Messages) == 0 {
			break
		}
		received += len(resp.Messages)
		fresh := false
		for _, m := range resp.Messages {
			l := letter{Queue: name, ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), receipt: aws.ToString(m.ReceiptHandle)}
			if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
				l.Sent = time.UnixMilli(ms).UTC()
			}
			l.Receives, _ = strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
			if i, ok := index[l.ID]; ok {
				out[i] = l
				continue
			}
			fresh = true
			index[l.ID] = len(out)
			out = append(out, l)
		}
		if !fresh {
			fmt.Fprintf(t.errOut, "oncectl: the scan of %s outlasted its %ds hold on the messages it received: "+
				"the dead letters it did not reach are left for the next run\n", queue.Name(url), holdFor)
			break
		}
		if done(out) {
			break
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Sent.Before(out[j].Sent) })
	return out, nil
}

// release makes letters visible again at once.
func (t *Tool) release(ctx context.Context, url string, letters []letter) error {
	var errs []error
	for _, l := range letters {
		_, err := t.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(l.receipt), VisibilityTimeout: 0,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("release %s: %w", l.ID, err))
		}
	}
	return errors.Join(errs...)
}
