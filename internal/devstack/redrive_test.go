package devstack_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// TestUnknownRedriveEndToEnd follows an UNKNOWN record that nobody
// resolves through the chain that hands it to the reconciler again at its
// expiry, on the devstack's stream pollers, queues and functions: the
// sweeper arms a check for the move to UNKNOWN, due at the record's expiry;
// the checker, finding it still UNKNOWN under that lease token then,
// redrives it (a new lease token, its expiry a retention on, no TTL
// attribute, unknown_redriven); and the redrive, a move to UNKNOWN too,
// arms the next check. The reconciler's mapping is off, so that nothing
// resolves the record meanwhile (what it does with a redrive is the same as
// with any move to UNKNOWN: TestRecoveryWithoutTTL). ONCE_RETENTION cannot
// be under an hour, so the test moves the record's expiry (expires_at_ms,
// under its lease token) to seconds ahead, as if an hour had passed: that
// write is a change to UNKNOWN as well, whose check the sweeper arms.
func TestUnknownRedriveEndToEnd(t *testing.T) {
	env := recoveryEnv(t)
	out := &lambdatest.Buffer{}
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		Output:       out,
		TemplatePath: dynamotest.TemplatePath(t),
		StateDir:     t.TempDir(),
		StreamsOff:   []string{"ReconcilerFunction"},
	})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
	cfg := stack.Config()
	db := dynamotest.Client(t)
	table := cfg.Table("IdempotencyTable")
	store := dynamo.New(db, table)

	key := fmt.Sprintf("redrive-%d", time.Now().UnixNano())
	body := `{"amount": 3100, "currency": "EUR", "customer": "cus_9", "source": "tok_visa"}`
	if r := send(t, stack.URL(), "/v1/charges", key, "after-provider-call", body); r.status != http.StatusBadGateway {
		t.Fatalf("crash = %d %s, want 502", r.status, r.body)
	}
	k := idempotency.NewKey("acme", key)

	// The reservation's check hands it to UNKNOWN (the reconciler's mapping
	// being off, it stays there), its expiry a retention on.
	unknown := waitRecord(t, store, k, 30*time.Second, func(r idempotency.Record) bool { return r.Status == idempotency.StatusUnknown })
	if left := time.Until(unknown.ExpiresAt); left < 50*time.Minute {
		t.Fatalf("UNKNOWN record expires in %v, want about a retention (1h)", left)
	}
	metrics := waitCounts(t, out, 10*time.Second, func(m map[string]int) bool { return m["check_scheduled"] >= 2 })
	before := metrics["check_scheduled"]
	if metrics["unknown_redriven"] != 0 {
		t.Fatalf("unknown_redriven = %d before its expiry, want 0", metrics["unknown_redriven"])
	}

	// An hour on, for this record: its expiry 3s ahead, fenced on its lease
	// token, as it is still UNKNOWN.
	due := time.Now().Add(3 * time.Second)
	_, err = db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:           aws.String(table),
		Key:                 map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: k.ID()}},
		UpdateExpression:    aws.String("SET #ms = :due"),
		ConditionExpression: aws.String("#status = :unknown AND #token = :token"),
		ExpressionAttributeNames: map[string]string{
			"#ms": dynamo.AttrExpiresAtMS, "#status": dynamo.AttrStatus, "#token": dynamo.AttrLeaseToken,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":due":     &types.AttributeValueMemberN{Value: strconv.FormatInt(due.UnixMilli(), 10)},
			":unknown": &types.AttributeValueMemberS{Value: string(idempotency.StatusUnknown)},
			":token":   &types.AttributeValueMemberS{Value: unknown.LeaseToken},
		},
	})
	if err != nil {
		t.Fatalf("move the expiry: %v", err)
	}

	// The checker redrives it at that expiry: a new lease token, its expiry
	// a retention on, still without the TTL attribute.
	redriven := waitRecord(t, store, k, 30*time.Second, func(r idempotency.Record) bool { return r.LeaseToken != unknown.LeaseToken })
	took := time.Since(due)
	if redriven.Status != idempotency.StatusUnknown {
		t.Fatalf("after the redrive: %s, want UNKNOWN", redriven.Status)
	}
	if took < -100*time.Millisecond {
		t.Errorf("redriven %v before its expiry", -took)
	}
	if left := time.Until(redriven.ExpiresAt); left < 50*time.Minute {
		t.Errorf("redriven record expires in %v, want a retention (1h) on", left)
	}
	item, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: k.ID()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := item.Item[dynamo.AttrExpiresAt]; ok {
		t.Errorf("the redriven UNKNOWN record carries the TTL attribute %s", dynamo.AttrExpiresAt)
	}
	t.Logf("redriven %v after its expiry", took.Round(10*time.Millisecond))

	// Counted once, and the redrive armed the next check.
	metrics = waitCounts(t, out, 10*time.Second, func(m map[string]int) bool {
		return m["unknown_redriven"] >= 1 && m["check_scheduled"] >= before+2
	})
	if n := metrics["unknown_redriven"]; n != 1 {
		t.Errorf("unknown_redriven = %d, want 1", n)
	}
	// A retry meanwhile is told to wait: the key stays held, and the
	// provider charged once.
	if r := send(t, stack.URL(), "/v1/charges", key, "", body); r.status != http.StatusConflict {
		t.Errorf("retry of the redriven record = %d %s, want 409", r.status, r.body)
	}
	if n := charges(t, stack, forwardKey(t, k, body)); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
}

// waitRecord reads k until ok says its record is there, or fails the test
// after within.
func waitRecord(t *testing.T, store *dynamo.Store, k idempotency.Key, within time.Duration, ok func(idempotency.Record) bool) idempotency.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec, err := store.Get(t.Context(), k)
		if err == nil && ok(rec) {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s not as wanted within %v: %s, lease token %s, expiry %v, %v", k.ID(), within, rec.Status, rec.LeaseToken, rec.ExpiresAt, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCounts reads the metrics counted in out until ok says they are as
// wanted, or until within has passed, and returns them.
func waitCounts(t *testing.T, out *lambdatest.Buffer, within time.Duration, ok func(map[string]int) bool) map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m := lambdatest.CountsAmong(out.String())
		if ok(m) || time.Now().After(deadline) {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
}
