package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/refunds"
)

// forgetCondition fences forget's DeleteItem on what the operator was shown:
// the record is still in the status and under the lease token read.
const forgetCondition = "#status = :status AND #lease = :lease"

// forgetView is what forget prints: the record as show prints it (no
// bodies), and whether it was deleted.
type forgetView struct {
	recordView
	Forgotten bool `json:"forgotten"`
	// SettleHold, for a refund's record, says how its hold on the payment,
	// left with no record of its key once the record is forgotten, is
	// settled.
	SettleHold string `json:"settle_hold,omitempty"`
}

// settleHoldHint is, for a refund's record, how its hold is settled once the
// record is forgotten ("" for another route's).
func settleHoldHint(rec idempotency.Record) string {
	if rec.Route != refunds.RouteCreate {
		return ""
	}
	payment := "PAYMENT"
	var req refunds.Request
	if json.Unmarshal(rec.Request, &req) == nil && payments.ValidID(req.Payment) {
		payment = payments.PK(rec.Key.Tenant, req.Payment)
	}
	return fmt.Sprintf("forgotten, its hold on the payment (if any) stays: `oncectl holds %s`, then, as the provider's refunds say, "+
		"`oncectl settle-hold (release | refunded -provider-refund ID) -no-record -hold %s -confirm AMOUNT %s`", payment, rec.Key.Hash, payment)
}

// forget deletes an UNKNOWN record that can never be reconciled, fenced on
// the status and lease token it read and showed: the operator's way out of a
// reconcile_failed alarm. It needs -confirm with the lease token shown.
func (t *Tool) forget(ctx context.Context, args []string) error {
	fs := t.flags("forget", "[-confirm LEASE-TOKEN] (RECORD | -tenant T -key KEY)",
		"Delete an UNKNOWN record that can never be reconciled, for good: a retry of its key then runs again\n"+
			"(a refund's hold stays on its payment with no record of its key: settle it with `oncectl settle-hold\n"+
			"-no-record`, see `oncectl holds`; for a refund's record the output says so, as \"settle_hold\").\n"+
			"Without -confirm it only shows the record; -confirm takes the lease token shown, and the record\n"+
			"is deleted only if it is still UNKNOWN under that token.")
	read := t.recordArg(fs)
	confirm := fs.String("confirm", "", "the record's lease token, as shown: forget it")
	key, rec, err := read(ctx, args)
	if err != nil {
		return err
	}
	now := t.now()
	v := forgetView{recordView: view(rec, now), SettleHold: settleHoldHint(rec)}
	refusal := forgettable(rec, now)
	switch {
	case refusal != "":
		err = fmt.Errorf("%s is not forgotten: %s", key.ID(), refusal)
	case *confirm == "":
		err = fmt.Errorf("%s is not forgotten: forgetting deletes it for good, and a retry of its key runs its request again "+
			"(settle what it did at the other system first); confirm with -confirm %s", key.ID(), rec.LeaseToken)
	case *confirm != rec.LeaseToken:
		err = fmt.Errorf("%s is not forgotten: it is under lease token %s now, not %s: it changed since it was shown; look at it again",
			key.ID(), rec.LeaseToken, *confirm)
	default:
		err = t.deleteFenced(ctx, rec)
		v.Forgotten = err == nil
	}
	if werr := t.writeJSON(v); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	slog.New(slog.NewJSONHandler(t.errOut, nil)).Info("record forgotten by an operator",
		"record", key.ID(), "tenant", key.Tenant, "route", rec.Route, "status", string(rec.Status),
		"lease_token", rec.LeaseToken, "expires_at", rec.ExpiresAt.UTC(), "updated_at", rec.UpdatedAt.UTC())
	return nil
}

// forgettable says why rec may not be forgotten at now ("" when it may).
// Only an UNKNOWN record may: COMPLETED is a final answer its retries
// replay, a live reservation's request may still be running, an expired one
// that is not External leaves its key free already, and an External
// reservation whose lease ran out is first handed to the reconciler (a
// delete of it after its lease looks, on the stream, like TTL's, and the
// sweeper would restore it as UNKNOWN).
func forgettable(rec idempotency.Record, now time.Time) string {
	switch {
	case rec.Status == idempotency.StatusUnknown:
		return ""
	case rec.Status == idempotency.StatusCompleted:
		return "it is COMPLETED: its retries replay its answer, and forgotten, a retry would run its request again"
	case rec.Status == idempotency.StatusInProgress && !rec.Expired(now):
		return fmt.Sprintf("it is IN_PROGRESS and its lease runs until %s: its request may still be running", rec.ExpiresAt.UTC().Format(time.RFC3339))
	case rec.Status == idempotency.StatusInProgress && rec.External:
		return "it is an External reservation whose lease ran out: hand it to the reconciler first (`oncectl reannounce`), " +
			"and forget it once it is UNKNOWN if it can never be reconciled"
	case rec.Status == idempotency.StatusInProgress:
		return "it is an abandoned reservation of a route that is not External: the key is free already"
	}
	return fmt.Sprintf("it is %s", rec.Status)
}

// deleteFenced deletes rec's item provided it is still in rec's status
// under rec's lease token.
func (t *Tool) deleteFenced(ctx context.Context, rec idempotency.Record) error {
	_, err := t.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:           aws.String(t.cfg.Table("IdempotencyTable")),
		Key:                 map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: rec.Key.ID()}},
		ConditionExpression: aws.String(forgetCondition),
		ExpressionAttributeNames: map[string]string{
			"#status": dynamo.AttrStatus,
			"#lease":  dynamo.AttrLeaseToken,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":status": &types.AttributeValueMemberS{Value: string(rec.Status)},
			":lease":  &types.AttributeValueMemberS{Value: rec.LeaseToken},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &failed) && len(failed.Item) == 0:
		return fmt.Errorf("%s is not forgotten: it is gone already", rec.Key.ID())
	case errors.As(err, &failed):
		current, derr := dynamo.RecordFromItem(failed.Item)
		if derr != nil {
			return fmt.Errorf("%s is not forgotten: it changed meanwhile", rec.Key.ID())
		}
		return fmt.Errorf("%s is not forgotten: it changed meanwhile, to %s under lease token %q; look at it again",
			rec.Key.ID(), current.Status, current.LeaseToken)
	case err != nil:
		return fmt.Errorf("delete %s: %w", rec.Key.ID(), err)
	}
	return nil
}
