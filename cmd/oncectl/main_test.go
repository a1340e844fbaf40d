package main

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqstest"
)

// TestAgainstDevstack runs oncectl against a running devstack, configured
// from the stack's own environment: a record left UNKNOWN (its route has no
// resolver, so the reconciler leaves it for an operator) is listed, shown and
// re-announced, which reaches the reconciler again; a dead letter of the
// check queue is listed and sent back, and the checker consumes it.
func TestAgainstDevstack(t *testing.T) {
	client := dynamotest.Client(t)
	// Tables of the test's own, which the devstack creates.
	env := dynamotest.FreshNames(t, client).Env()
	maps.Copy(env, map[string]string{
		"DYNAMODB_ENDPOINT": dynamotest.Endpoint(t), "PORT": "0", "PROVIDER_PORT": "0", "SQS_PORT": "0", "ONCE_DEV_TTL": "off",
	})
	var stackOut lambdatest.Buffer
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv: func(k string) string { return env[k] }, Output: &stackOut,
		TemplatePath: dynamotest.TemplatePath(t), StateDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	cfg := stack.Config()
	// oncectl's environment: the endpoints, table and queues of the stack.
	ctlEnv := map[string]string{
		config.EnvDynamoDBEndpoint: stack.DynamoDBEndpoint(), config.EnvSQSEndpoint: stack.SQSEndpoint(),
		config.TableEnv("IdempotencyTable"): cfg.Table("IdempotencyTable"),
	}
	oncectl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), args, func(k string) string { return ctlEnv[k] }, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	now := time.Now()
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "order-1234"), Status: idempotency.StatusUnknown, Route: "POST /v1/legacy",
		Fingerprint: "f", External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour),
		CreatedAt: now, UpdatedAt: now,
	}
	if err := dynamo.New(client, cfg.Table("IdempotencyTable")).Reserve(t.Context(), rec, nil, now); err != nil {
		t.Fatal(err)
	}
	unroutable := func() int { return lambdatest.CountsAmong(stackOut.String())["reconcile_unroutable"] }
	lambdatest.WaitFor(t, 15*time.Second, "the reconciler to leave the record for an operator", func() bool { return unroutable() == 1 })

	if code, out, errOut := oncectl("unknown"); code != 0 || !strings.Contains(out, rec.Key.ID()) || !strings.Contains(out, "POST /v1/legacy") {
		t.Errorf("oncectl unknown = %d %q %q, want the record", code, out, errOut)
	}
	if code, out, errOut := oncectl("show", "-tenant", "acme", "-key", "order-1234"); code != 0 || !strings.Contains(out, `"status": "UNKNOWN"`) || strings.Contains(out, "order-1234") {
		t.Errorf("oncectl show = %d %q %q, want the UNKNOWN record, without its raw key", code, out, errOut)
	}
	if code, out, errOut := oncectl("reannounce", rec.Key.ID()); code != 0 {
		t.Fatalf("oncectl reannounce = %d %q %q", code, out, errOut)
	}
	lambdatest.WaitFor(t, 15*time.Second, "the reconciler to get the record again", func() bool { return unroutable() == 2 })

	// A dead letter of the check queue.
	q, err := queue.Client(t.Context(), cfg, queue.ClientOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := queue.Resolve(t.Context(), q, cfg.CheckDLQ)
	if err != nil {
		t.Fatal(err)
	}
	check := `{"record":"acme#` + strings.Repeat("a", 64) + `","route":"POST /v1/charges","lease_token":"x","deadline":"2026-01-01T00:00:00Z"}`
	sent, err := q.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String(check)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(sent.MessageId)
	if code, out, errOut := oncectl("dlq", "list"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("oncectl dlq list = %d %q %q, want the letter", code, out, errOut)
	}
	if code, out, errOut := oncectl("dlq", "redrive", "check", id); code != 0 {
		t.Fatalf("oncectl dlq redrive = %d %q %q", code, out, errOut)
	}
	src, err := queue.Resolve(t.Context(), q, cfg.CheckQueue)
	if err != nil {
		t.Fatal(err)
	}
	// The check queue keeps, delayed, the checks armed for the UNKNOWN
	// record (its reservation and its reannounce each arm one, due at its
	// expiry an hour away, sent on every recovery.MaxDelay): the redriven
	// check is consumed when nothing else is left in either queue, and at
	// least one of them is there (the Scheduler arms UNKNOWN records too).
	lambdatest.WaitFor(t, 15*time.Second, "the checker to consume the redriven check", func() bool {
		v1, f1, d1 := sqstest.Counts(t, q, src)
		v2, f2, d2 := sqstest.Counts(t, q, dlq)
		return v1+f1+v2+f2+d2 == "00000" && d1 != "0"
	})
}
