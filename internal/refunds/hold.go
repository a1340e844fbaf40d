package refunds

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/payments"
)

// Tables names the tables refunds write.
type Tables struct {
	// Refunds is the refunds table.
	Refunds string
	// Payments is the payments table.
	Payments string
}

// errStaleHold: the payment holds an amount for the key although no live
// reservation of the key does: an UNKNOWN record an operator deleted
// (oncectl forget), or one completed with the response_too_large problem
// because the effects giving the hold back could not be written (the api
// counted reserve_effects_dropped, alarmed; the reconciler
// reconcile_effects_dropped), since expired. The hold is an operator's to settle;
// until then every retry of the key answers 500 and nothing is written.
// `oncectl holds` shows it stale (or, once its key has no record, no_record:
// TTL may have deleted an UNKNOWN record the sweeper has yet to restore),
// and `oncectl settle-hold` (with -no-record for the latter) settles it as
// the provider says, in one transaction fenced on the hold and on the key
// having no live record: release (refundable back) or refunded
// (amount_refunded, and the refund item, so that a retry answers
// ErrKeyUsed rather than refunding again).
var errStaleHold = errors.New("refunds: the payment already holds an amount for this key")

// Holds are the effects written with the reservation of key for req (Begin's
// holds): the check that the key has never named a refund, and the hold on
// the payment. With an amount, the hold takes it from what is left,
// provided that is enough; without, it takes all that is left, provided
// something is. Either way only a succeeded payment of the key's tenant has
// anything left; a failed condition answers as the payment stands (see
// rejectHold).
func (t Tables) Holds(key idempotency.Key, req Request) []idempotency.Effect {
	id := ID(key)
	unused := dynamo.Check{
		Table:     t.Refunds,
		Key:       map[string]any{KeyAttr: PK(key.Tenant, id)},
		Condition: "attribute_not_exists(#pk)",
		Names:     map[string]string{"#pk": KeyAttr},
		Reject:    func(map[string]types.AttributeValue) error { return ErrKeyUsed },
	}
	hold := dynamo.Update{
		Table:  t.Payments,
		Key:    paymentKey(key, req.Payment),
		Names:  holdNames(key),
		Values: map[string]any{":succeeded": string(payments.StatusSucceeded)},
		Reject: rejectHold(key),
	}
	hold.Names["#status"], hold.Names["#refundable"] = payments.AttrStatus, payments.AttrRefundable
	const fresh = " AND attribute_not_exists(#holds.#key)"
	if req.Amount > 0 {
		hold.Update = "SET #refundable = #refundable - :amount, #holds.#key = :amount"
		hold.Condition = "#status = :succeeded AND #refundable >= :amount" + fresh
		hold.Values[":amount"] = req.Amount
	} else {
		hold.Update = "SET #holds.#key = #refundable, #refundable = :zero"
		hold.Condition = "#status = :succeeded AND #refundable > :zero" + fresh
		hold.Values[":zero"] = 0
	}
	return []idempotency.Effect{unused, hold}
}

// rejectHold is the answer to a hold of key that failed, given the payment
// as it stands (nil when there is none).
func rejectHold(key idempotency.Key) func(map[string]types.AttributeValue) error {
	return func(item map[string]types.AttributeValue) error {
		if len(item) == 0 {
			return fmt.Errorf("refunds: %w", payments.ErrNotFound)
		}
		var p payments.Payment
		if err := attributevalue.UnmarshalMap(item, &p); err != nil {
			return fmt.Errorf("refunds: the payment item: %w", err)
		}
		_, held := p.Holds[key.Hash]
		_, kept := item[payments.AttrRefundable]
		switch {
		case p.Status != payments.StatusSucceeded:
			return fmt.Errorf("refunds: payment %s is %s: %w", p.ID, p.Status, ErrNotRefundable)
		case held:
			return errStaleHold
		case !kept:
			// Settled before refunds existed: a 500, not a stored "nothing
			// left", until its balance is backfilled.
			return fmt.Errorf("refunds: payment %s has no %s: it was settled before refunds", p.ID, payments.AttrRefundable)
		}
		return &ExceedsError{Left: p.Refundable}
	}
}

// Completion is the effects of refund ref made for key: the refund item,
// and the hold moved into the payment's amount_refunded. The hold must be
// the refund's amount: anything else means the provider refunded what was
// not held, and the write fails (a 500; the record stays for the
// reconciler, whose failure raises the alarm).
func (t Tables) Completion(key idempotency.Key, ref Refund) []idempotency.Effect {
	names := holdNames(key)
	names["#refunded"] = payments.AttrAmountRefunded
	return []idempotency.Effect{
		dynamo.Insert(t.Refunds, KeyAttr, ref),
		dynamo.Update{
			Table:     t.Payments,
			Key:       paymentKey(key, ref.Payment),
			Update:    "SET #refunded = #refunded + :amount REMOVE #holds.#key",
			Condition: "#holds.#key = :amount",
			Names:     names,
			Values:    map[string]any{":amount": ref.Amount},
		},
	}
}

// Release is the effect that gives the hold of key on payment back: written
// when provably nothing was refunded.
func (t Tables) Release(key idempotency.Key, payment string) idempotency.Effect {
	names := holdNames(key)
	names["#refundable"] = payments.AttrRefundable
	return dynamo.Update{
		Table:     t.Payments,
		Key:       paymentKey(key, payment),
		Update:    "SET #refundable = #refundable + #holds.#key REMOVE #holds.#key",
		Condition: "attribute_exists(#holds.#key)",
		Names:     names,
	}
}

func paymentKey(key idempotency.Key, payment string) map[string]any {
	return map[string]any{payments.KeyAttr: payments.PK(key.Tenant, payment)}
}

// holdNames names the payment's holds (#holds) and the key's among them
// (#holds.#key).
func holdNames(key idempotency.Key) map[string]string {
	return map[string]string{"#holds": payments.AttrHolds, "#key": key.Hash}
}
