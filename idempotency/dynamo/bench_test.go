package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
)

// payment is a payment-sized item, as the payments package stores one.
type payment struct {
	PK          string            `dynamodbav:"pk"`
	ID          string            `dynamodbav:"id"`
	Tenant      string            `dynamodbav:"tenant"`
	Amount      int64             `dynamodbav:"amount"`
	Currency    string            `dynamodbav:"currency"`
	Customer    string            `dynamodbav:"customer"`
	Description string            `dynamodbav:"description,omitempty"`
	Metadata    map[string]string `dynamodbav:"metadata,omitempty"`
	Source      string            `dynamodbav:"source"`
	Status      string            `dynamodbav:"status"`
	Created     int64             `dynamodbav:"created"`
}

func newPayment(i int) payment {
	id := fmt.Sprintf("pay_%024x", i)
	return payment{
		PK: "acme#" + id, ID: id, Tenant: "acme", Amount: 1999, Currency: "usd", Customer: "cus_123",
		Description: "Order #1234", Metadata: map[string]string{"order": "1234", "channel": "web"},
		Source: "tok_visa", Status: "pending", Created: time.Now().Unix(),
	}
}

// completedPayment is the record an Atomic POST /v1/payments commits.
func completedPayment(key idempotency.Key, p payment, now time.Time) idempotency.Record {
	return idempotency.Record{
		Key: key, Status: idempotency.StatusCompleted, Route: "POST /v1/payments",
		Fingerprint: "3f2a0b6c4e8d1f7a9b5c3e2d1f0a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a",
		ExpiresAt:   now.Add(24 * time.Hour),
		Response: &idempotency.Response{
			Status: 201,
			Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/" + p.ID},
			Body: fmt.Appendf(nil, `{"id":%q,"object":"payment","amount":%d,"currency":%q,"customer":%q,`+
				`"description":%q,"metadata":{"channel":"web","order":"1234"},"source":%q,"status":%q,"created":%d}`,
				p.ID, p.Amount, p.Currency, p.Customer, p.Description, p.Source, p.Status, p.Created),
		},
		CreatedAt: now, UpdatedAt: now,
	}
}

// BenchmarkCommit measures a first execution: the record and the payment in
// one transaction.
func BenchmarkCommit(b *testing.B) {
	s, _, names := newStore(b)
	ctx := b.Context()
	i := 0
	for b.Loop() {
		i++
		p := newPayment(i)
		now := time.Now()
		e := dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", p)
		if err := s.Commit(ctx, completedPayment(idempotency.NewKey("acme", fmt.Sprint(i)), p, now), []idempotency.Effect{e}, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitReplay measures a retry: the same commit fails its
// condition and returns the stored record.
func BenchmarkCommitReplay(b *testing.B) {
	s, _, names := newStore(b)
	ctx := b.Context()
	p := newPayment(0)
	now := time.Now()
	key := idempotency.NewKey("acme", "replayed")
	rec := completedPayment(key, p, now)
	e := []idempotency.Effect{dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", p)}
	if err := s.Commit(ctx, rec, e, now); err != nil {
		b.Fatal(err)
	}
	retry := newPayment(1)
	e2 := []idempotency.Effect{dynamo.Insert(names.ByLogicalID["PaymentsTable"], "pk", retry)}
	for b.Loop() {
		now := time.Now()
		err := s.Commit(ctx, completedPayment(key, retry, now), e2, now)
		var conflict *idempotency.ConflictError
		if !errors.As(err, &conflict) || conflict.Existing == nil || conflict.Existing.Response == nil {
			b.Fatalf("Commit of a replay = %v, want a *ConflictError with the stored response", err)
		}
	}
}

// BenchmarkBarePut is the baseline: one conditional PutItem of a payment,
// what the endpoint would cost without idempotency.
func BenchmarkBarePut(b *testing.B) {
	_, client, names := newStore(b)
	ctx := b.Context()
	i := 0
	for b.Loop() {
		i++
		item, err := attributevalue.MarshalMap(newPayment(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := barePut(ctx, client, names.ByLogicalID["PaymentsTable"], item); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInterleaved runs a first-execution Commit, a replayed Commit and a
// bare PutItem in turn in each iteration, and reports each one's median
// latency and the ratios to the bare put: on a shared machine, interleaving
// exposes the three to the same load, which separate benchmarks do not. It
// runs on the template's tables, which have streams, and on plain tables:
// DynamoDB Local serves stream-enabled tables an order of magnitude slower,
// which AWS does not.
func BenchmarkInterleaved(b *testing.B) {
	b.Run("streams", func(b *testing.B) {
		_, client, names := newStore(b)
		interleaved(b, client, names.ByLogicalID["IdempotencyTable"], names.ByLogicalID["PaymentsTable"])
	})
	b.Run("plain", func(b *testing.B) {
		client := dynamotest.Client(b)
		interleaved(b, client, plainTable(b, client, "idempotency"), plainTable(b, client, "payments"))
	})
}

func interleaved(b *testing.B, client *dynamodb.Client, idempotencyTable, payments string) {
	s := dynamo.New(client, idempotencyTable)
	ctx := b.Context()
	now := time.Now()
	replayKey := idempotency.NewKey("acme", "replayed")
	first := newPayment(-1)
	effects := []idempotency.Effect{dynamo.Insert(payments, "pk", first)}
	if err := s.Commit(ctx, completedPayment(replayKey, first, now), effects, now); err != nil {
		b.Fatal(err)
	}
	var commits, replays, puts []time.Duration
	i := 0
	for b.Loop() {
		i++
		p := newPayment(2 * i)
		now := time.Now()
		start := time.Now()
		e := []idempotency.Effect{dynamo.Insert(payments, "pk", p)}
		if err := s.Commit(ctx, completedPayment(idempotency.NewKey("acme", fmt.Sprint(i)), p, now), e, now); err != nil {
			b.Fatal(err)
		}
		commits = append(commits, time.Since(start))

		start = time.Now()
		var conflict *idempotency.ConflictError
		if err := s.Commit(ctx, completedPayment(replayKey, p, now), e, now); !errors.As(err, &conflict) {
			b.Fatalf("Commit of a replay = %v, want a *ConflictError", err)
		}
		replays = append(replays, time.Since(start))

		start = time.Now()
		item, err := attributevalue.MarshalMap(newPayment(2*i + 1))
		if err != nil {
			b.Fatal(err)
		}
		if err := barePut(ctx, client, payments, item); err != nil {
			b.Fatal(err)
		}
		puts = append(puts, time.Since(start))
	}
	c, r, p := median(commits), median(replays), median(puts)
	b.ReportMetric(float64(c.Microseconds()), "commit-µs")
	b.ReportMetric(float64(r.Microseconds()), "replay-µs")
	b.ReportMetric(float64(p.Microseconds()), "put-µs")
	b.ReportMetric(float64(c)/float64(p), "commit/put")
	b.ReportMetric(float64(r)/float64(p), "replay/put")
}

// plainTable creates a table keyed by pk without a stream, dropped when b
// ends.
func plainTable(b *testing.B, client *dynamodb.Client, name string) string {
	b.Helper()
	table := fmt.Sprintf("bench-plain-%s-%d", name, time.Now().UnixNano())
	_, err := client.CreateTable(b.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return table
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// barePut writes item if its key is free. A condition failure is taken for
// the SDK's retry of an attempt that landed but timed out, which happens on an
// overloaded machine.
func barePut(ctx context.Context, client *dynamodb.Client, table string, item map[string]types.AttributeValue) error {
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	return err
}
