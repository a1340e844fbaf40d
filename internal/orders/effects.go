package orders

import (
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/outbox"
)

// Effects of the phases. Every one is idempotent: applied again (a request
// that starts over, a resolver resuming from a stale stream image) it
// leaves the item as it was, so that a phase run again repeats nothing.

// upsert is the write of item (a struct with dynamodbav tags) into table
// that creates it when absent and leaves every attribute already there as
// it is: an UpdateItem of "SET #a = if_not_exists(#a, :a), ..." for each
// attribute but the key. A new item is an INSERT on the table's stream.
func upsert(table string, item any) (idempotency.Effect, error) {
	m, err := attributevalue.MarshalMap(item)
	if err != nil {
		return nil, fmt.Errorf("orders: marshal %T: %w", item, err)
	}
	key, ok := m[KeyAttr]
	if !ok {
		return nil, fmt.Errorf("orders: %T has no %s", item, KeyAttr)
	}
	names := make([]string, 0, len(m))
	for name := range m {
		if name != KeyAttr {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	u := dynamo.Update{
		Table:  table,
		Key:    map[string]any{KeyAttr: key},
		Names:  map[string]string{},
		Values: map[string]any{},
	}
	for i, name := range names {
		n, v := fmt.Sprintf("#a%d", i), fmt.Sprintf(":a%d", i)
		if i == 0 {
			u.Update = "SET "
		} else {
			u.Update += ", "
		}
		u.Update += n + " = if_not_exists(" + n + ", " + v + ")"
		u.Names[n], u.Values[v] = name, m[name]
	}
	return u, nil
}

// charged records the provider's answer on the order: paid with the charge,
// or failed with the charge and failureCode; at the point charge_created.
// The order must exist, and hold no other charge: a provider that answered
// another charge for the same forwarded key fails the phase (a 500) rather
// than rewrite what the order says it was charged.
func charged(table string, o Order, status Status, charge, failureCode string) idempotency.Effect {
	u := dynamo.Update{
		Table:     table,
		Key:       map[string]any{KeyAttr: o.PK},
		Update:    "SET #status = :status, #charge = :charge, #point = :point",
		Condition: "attribute_exists(#pk) AND (attribute_not_exists(#charge) OR #charge = :charge)",
		Names:     map[string]string{"#pk": KeyAttr, "#status": "status", "#charge": "charge", "#point": "recovery_point"},
		Values:    map[string]any{":status": string(status), ":charge": charge, ":point": PointChargeCreated},
	}
	if failureCode != "" {
		u.Update += ", #failure = :failure"
		u.Names["#failure"] = "failure_code"
		u.Values[":failure"] = failureCode
	}
	return u
}

// holds conditions a phase on the order holding charge already: what a
// request that finds its order charged records instead of charged, which
// would move a finished order's point back. It is an UpdateItem that writes
// the charge the order holds (changing nothing), not a ConditionCheck, so
// that the functions need no other grant than the UpdateItem their phases
// already make.
func holds(table string, o Order, charge string) idempotency.Effect {
	return dynamo.Update{
		Table:     table,
		Key:       map[string]any{KeyAttr: o.PK},
		Update:    "SET #charge = :charge",
		Condition: "#charge = :charge",
		Names:     map[string]string{"#charge": "charge"},
		Values:    map[string]any{":charge": charge},
	}
}

// finished marks the order complete: at the point finished and, when it is
// paid, its receipt queued (unless the receipts function got there first).
func finished(table string, o Order, paid bool) idempotency.Effect {
	u := dynamo.Update{
		Table:     table,
		Key:       map[string]any{KeyAttr: o.PK},
		Update:    "SET #point = :point",
		Condition: "attribute_exists(#pk)",
		Names:     map[string]string{"#pk": KeyAttr, "#point": "recovery_point"},
		Values:    map[string]any{":point": PointFinished},
	}
	if paid {
		u.Update += ", #receipt = if_not_exists(#receipt, :queued)"
		u.Names["#receipt"] = outbox.OrderReceipt
		u.Values[":queued"] = string(ReceiptQueued)
	}
	return u
}

// rejected marks the order failed without a charge (the provider refused
// the request itself) and complete; never a paid order.
func rejected(table string, o Order, failureCode string) idempotency.Effect {
	return dynamo.Update{
		Table:     table,
		Key:       map[string]any{KeyAttr: o.PK},
		Update:    "SET #status = :failed, #failure = :failure, #point = :point",
		Condition: "attribute_exists(#pk) AND #status <> :paid",
		Names:     map[string]string{"#pk": KeyAttr, "#status": "status", "#failure": "failure_code", "#point": "recovery_point"},
		Values:    map[string]any{":failed": string(StatusFailed), ":paid": string(StatusPaid), ":failure": failureCode, ":point": PointFinished},
	}
}
