package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/tenant"
	"github.com/oncehq/once/internal/worker"
)

// pending lists the payments still pending some time after their creation:
// a Scan of the payments table with a filter, every page of it (up to the
// page bound), so that the -limit payments listed are the oldest.
func (t *Tool) pending(ctx context.Context, args []string) error {
	fs := t.flags("pending", "[-tenant T] [-older-than D] [-limit N] [-json]",
		"List the payments still pending, oldest first, by their ID (tenant#pay_id). Neither the\n"+
			"source, the customer, the description nor the metadata is shown.")
	tenant := fs.String("tenant", "", "only this tenant's payments")
	olderThan := fs.Duration("older-than", 10*time.Minute, "only payments created at least this long ago")
	limit := fs.Int("limit", 100, "list at most this many")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	if err := t.parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *limit < 1:
		return usageError{fs, "-limit must be positive"}
	case *olderThan < 0:
		return usageError{fs, "-older-than must not be negative"}
	}
	now := t.now()
	// created is stored in whole seconds: a payment created within the
	// second of the bound is left for the next listing.
	filter := "#status = :pending AND #created <= :before"
	names := map[string]string{"#status": payments.AttrStatus, "#created": "created"}
	values := map[string]types.AttributeValue{
		":pending": &types.AttributeValueMemberS{Value: string(payments.StatusPending)},
		":before":  &types.AttributeValueMemberN{Value: fmt.Sprint(now.Add(-*olderThan).Unix())},
	}
	if *tenant != "" {
		filter += " AND #tenant = :tenant"
		names["#tenant"] = "tenant"
		values[":tenant"] = &types.AttributeValueMemberS{Value: *tenant}
	}
	table := t.cfg.Table("PaymentsTable")
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(table),
		FilterExpression:          aws.String(filter),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	ps, err := t.scanPayments(ctx, in, "the payments listed are the oldest of those read, not of the whole table")
	if err != nil {
		return err
	}
	// created is to the second: the ID orders a second's payments, so that
	// a listing is the same each time.
	slices.SortFunc(ps, func(a, b payments.Payment) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.PK, b.PK))
	})
	if len(ps) > *limit {
		ps = ps[:*limit]
	}
	rows := make([]paymentSummary, len(ps))
	for i, p := range ps {
		rows[i] = t.paymentSummary(p, now)
	}
	err = writeListing(t, rows, *asJSON, "PAYMENT\tAMOUNT\tCREATED\tPENDING FOR\tRETRY WINDOW ENDS", func(s paymentSummary) string {
		return fmt.Sprintf("%s\t%d %s\t%s\t%s\t%s", s.Payment, s.Amount, s.Currency, s.Created.Format(time.RFC3339), s.For, s.WindowEnds.Format(time.RFC3339))
	})
	if err != nil || *asJSON {
		return err
	}
	fmt.Fprintf(t.errOut, "%d pending payment(s) created before %s\n", len(ps), now.Add(-*olderThan).UTC().Format(time.RFC3339))
	return nil
}

// paymentSummary is a line of the pending listing: what identifies the
// payment and how long it has waited, never its source, customer,
// description or metadata.
type paymentSummary struct {
	Payment  string    `json:"payment"`
	Tenant   string    `json:"tenant"`
	ID       string    `json:"id"`
	Amount   int64     `json:"amount"`
	Currency string    `json:"currency"`
	Created  time.Time `json:"created"`
	For      string    `json:"pending_for"`
	// WindowEnds is when the retrier stops charging the payment
	// (ONCE_WORKER_RETRY_WINDOW after its creation); after it, a requeued
	// payment is settled as the provider's record of its charge says.
	WindowEnds time.Time `json:"retry_window_ends"`
}

func (t *Tool) paymentSummary(p payments.Payment, now time.Time) paymentSummary {
	return paymentSummary{
		Payment: p.PK, Tenant: p.Tenant, ID: p.ID, Amount: p.Amount, Currency: p.Currency,
		Created: p.Created.UTC(), For: now.Sub(p.Created).Round(time.Second).String(),
		WindowEnds: p.Created.Add(t.cfg.WorkerRetryWindow).UTC(),
	}
}

// scanPayments reads the payments in scans, decoded; cut is what scanAll's
// warning says of a scan its page bound cut short.
func (t *Tool) scanPayments(ctx context.Context, in *dynamodb.ScanInput, cut string) ([]payments.Payment, error) {
	var ps []payments.Payment
	err := t.scanAll(ctx, in, cut, func(item map[string]types.AttributeValue) error {
		var p payments.Payment
		if err := attributevalue.UnmarshalMap(item, &p); err != nil {
			return fmt.Errorf("payment %s: %w", paymentPK(item), err)
		}
		ps = append(ps, p)
		return nil
	})
	return ps, err
}

func paymentPK(item map[string]types.AttributeValue) string {
	if s, ok := item[payments.KeyAttr].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return "(no pk)"
}

// requeueAttempts is the attempt count a requeued payment's message
// carries. The tool cannot know how many attempts were made (the worker's
// stream record is delivered up to three times, and retries may have run
// before): at least one, the worker's. The count only sets the backoff of
// the retrier's next attempt, should this one fail transiently.
const requeueAttempts = 1

// requeuePayment sends pending payments to the worker's retry queue, as the
// worker sends one whose charge failed transiently.
//
// The message says an attempt may have charged, made now: the tool cannot
// know what the worker's attempts did (a failed stream record may have
// charged and then failed to settle, or lost the provider's answer). Within
// the payment's retry window this changes nothing, since the retrier charges
// again under the same provider key (worker.ChargeKey), which the provider
// replays. After the window it is what makes the retrier look the charge up
// at the provider under that key, once a call made before the requeue can no
// longer take effect (ONCE_PROVIDER_SETTLE after now), and settle the payment
// as the provider's record says. "Nothing may have charged" would have it
// settle the payment failed without a look-up, even over a charge the
// provider made: money taken from a payment reported failed, which its
// client would pay again.
func (t *Tool) requeuePayment(ctx context.Context, args []string) error {
	fs := t.flags("requeue-payment", "PAYMENT...",
		"Send pending payments (tenant#pay_id, as pending lists them) to the worker's retry queue. The\n"+
			"retrier charges each again under its provider key, which the provider replays if it charged;\n"+
			"after the payment's retry window it looks the charge up instead and settles the payment as the\n"+
			"provider's record says. A payment that is not pending is refused.")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{fs, "want one or more payments (tenant#pay_id)"}
	}
	type target struct{ tenant, id string }
	var targets []target
	for _, arg := range fs.Args() {
		tnt, id, ok := strings.Cut(arg, "#")
		if !ok || !tenant.Valid(tnt) || !payments.ValidID(id) {
			return usageError{fs, fmt.Sprintf("%q is not a payment (tenant#pay_id, as `oncectl pending` lists them)", arg)}
		}
		targets = append(targets, target{tnt, id})
	}
	url, err := queue.Resolve(ctx, t.sqs, t.cfg.WorkerRetryQueue)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvWorkerRetryQueue, err)
	}
	table := payments.NewTable(t.db, t.cfg.Table("PaymentsTable"))
	var errs []error
	for _, tg := range targets {
		pk := payments.PK(tg.tenant, tg.id)
		p, err := table.Get(ctx, tg.tenant, tg.id)
		switch {
		case errors.Is(err, payments.ErrNotFound):
			errs = append(errs, fmt.Errorf("no payment %s", pk))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", pk, err))
			continue
		case p.Status != payments.StatusPending:
			errs = append(errs, fmt.Errorf("%s is %s, not pending: there is nothing to retry", pk, p.Status))
			continue
		}
		now := t.now()
		body, err := worker.RetryBody(p.Tenant, p.ID, requeueAttempts, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pk, err))
			continue
		}
		out, err := t.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: send to %s: %w", pk, queue.Name(url), err))
			continue
		}
		next := "charged again under its provider key"
		if !now.Before(p.Created.Add(t.cfg.WorkerRetryWindow)) {
			next = "its retry window has ended: its charge is looked up and it is settled as the provider's record says"
		}
		fmt.Fprintf(t.out, "%s requeued to %s (message %s): %s\n", pk, queue.Name(url), aws.ToString(out.MessageId), next)
	}
	return errors.Join(errs...)
}
