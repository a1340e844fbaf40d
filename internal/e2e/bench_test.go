package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/payments"
)

// BenchmarkCreatePayment is a first POST /v1/payments through the Lambda
// handler: event decoding, validation, fingerprint, one TransactWriteItems
// (record + payment), response encoding.
func BenchmarkCreatePayment(b *testing.B) {
	benchFirst(b, "/v1/payments", body1001)
}

// BenchmarkReplayPayment is a replay through the Lambda handler: one
// TransactWriteItems that fails its condition and returns the record.
func BenchmarkReplayPayment(b *testing.B) {
	benchReplay(b, "/v1/payments", body1001)
}

// BenchmarkCreateCharge is a first POST /v1/charges through the Lambda
// handler: a conditional PutItem reserving the key under a lease, the
// provider simulator's charge over loopback HTTP, and the fenced completion.
func BenchmarkCreateCharge(b *testing.B) {
	benchFirst(b, "/v1/charges", chargeBody("tok_visa"))
}

// BenchmarkReplayCharge is a replay of a charge: one PutItem whose failed
// condition returns the record; the provider is not called.
func BenchmarkReplayCharge(b *testing.B) {
	benchReplay(b, "/v1/charges", chargeBody("tok_visa"))
}

// BenchmarkCreateOrder is a first POST /v1/orders through the Lambda
// handler: three TransactWriteItems, one per phase (the reservation with the
// order, the charge recorded on it, the answer with the order complete and
// its receipt job), and the provider simulator's charge over loopback HTTP.
func BenchmarkCreateOrder(b *testing.B) {
	benchFirst(b, "/v1/orders", orderBody("tok_visa", "ada@example.com"))
}

// benchFirst invokes the api function with b.N first requests to path, each
// under its own key (events built before the timer starts), checks each
// answer is a 201 and that the first was stored, and reports the DynamoDB
// calls per op.
func benchFirst(b *testing.B, path, body string) {
	s := newStack(b)
	rq := func(i int) request {
		return request{path: path, tenant: "acme", keys: []string{fmt.Sprintf("bench-%d", i)}, body: body}
	}
	payloads := make([][]byte, b.N)
	for i := range payloads {
		payloads[i] = s.event(b, rq(i))
	}
	s.calls.take()
	b.ResetTimer()
	for i := range b.N {
		out, err := s.invoke(b.Context(), payloads[i])
		if err != nil || !bytes.Contains(out, []byte(`"statusCode":201`)) {
			b.Fatalf("invoke: %s, %v", out, err)
		}
	}
	b.StopTimer()
	reportCalls(b, s)
	if r := s.do(b, rq(0)); r.header.Get("Idempotent-Replayed") != "true" {
		b.Fatalf("bench-0 was not stored: %d %s", r.status, r.body)
	}
}

// benchReplay invokes the api function b.N times with a request to path
// that was answered already, checks each answer is a replay, and reports the
// DynamoDB calls per op.
func benchReplay(b *testing.B, path, body string) {
	s := newStack(b)
	rq := request{path: path, tenant: "acme", keys: []string{"bench-replay"}, body: body}
	payload := s.event(b, rq)
	if r := s.do(b, rq); r.status != http.StatusCreated {
		b.Fatalf("POST = %d %s", r.status, r.body)
	}
	s.calls.take()
	for b.Loop() {
		out, err := s.invoke(b.Context(), payload)
		if err != nil || !bytes.Contains(out, []byte(`Idempotent-Replayed`)) {
			b.Fatalf("invoke: %s, %v", out, err)
		}
	}
	reportCalls(b, s)
}

// reportCalls reports the api function's DynamoDB calls per operation.
func reportCalls(b *testing.B, s *stack) {
	b.Helper()
	_, n := s.calls.take()
	b.ReportMetric(float64(n)/float64(b.N), "ddb-calls/op")
}

// BenchmarkBareWrite is the floor: the same payment item written with one
// conditional PutItem, no idempotency, no HTTP.
func BenchmarkBareWrite(b *testing.B) {
	s := newStack(b)
	req, err := payments.Decode([]byte(body1001))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p := payments.New("acme", req, time.Now())
		item, err := attributevalue.MarshalMap(p)
		if err != nil {
			b.Fatal(err)
		}
		_, err = s.client.PutItem(b.Context(), &dynamodb.PutItemInput{
			TableName:           aws.String(s.names.ByLogicalID["PaymentsTable"]),
			Item:                item,
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareTransaction is the floor of any one-round-trip design: the
// same payment item and a minimal marker item for its key, written in one
// TransactWriteItems with attribute_not_exists on both. Against
// BenchmarkBareWrite it prices DynamoDB's transaction itself.
func BenchmarkBareTransaction(b *testing.B) {
	s := newStack(b)
	req, err := payments.Decode([]byte(body1001))
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		p := payments.New("acme", req, time.Now())
		item, err := attributevalue.MarshalMap(p)
		if err != nil {
			b.Fatal(err)
		}
		marker := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("acme#bare-%d", i)}}
		_, err = s.client.TransactWriteItems(b.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(s.names.ByLogicalID["IdempotencyTable"]), Item: marker, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
			{Put: &types.Put{TableName: aws.String(s.names.ByLogicalID["PaymentsTable"]), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreCommit is the transaction alone: the same record and payment
// committed by the DynamoDB store, without the handler and the adapter. The
// difference from BenchmarkCreatePayment is this repository's per-request
// overhead; the difference from BenchmarkBareWrite is the price of the
// transaction.
func BenchmarkStoreCommit(b *testing.B) {
	s := newStack(b)
	store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
	req, err := payments.Decode([]byte(body1001))
	if err != nil {
		b.Fatal(err)
	}
	canonical, err := idempotency.Canonical([]byte(body1001))
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		now := time.Now()
		p := payments.New("acme", req, now)
		body, _ := p.MarshalJSON()
		rec := idempotency.Record{
			Key:         idempotency.NewKey("acme", fmt.Sprintf("bench-%d", i)),
			Status:      idempotency.StatusCompleted,
			Route:       "POST /v1/payments",
			Fingerprint: idempotency.Fingerprint("POST", "POST /v1/payments", canonical),
			ExpiresAt:   now.Add(24 * time.Hour),
			Response: &idempotency.Response{Status: 201, Body: body,
				Header: map[string]string{"Content-Type": "application/json", "Location": p.Location()}},
			CreatedAt: now,
			UpdatedAt: now,
		}
		if err := store.Commit(b.Context(), rec, []idempotency.Effect{payments.Effect(s.names.ByLogicalID["PaymentsTable"], p)}, now); err != nil {
			b.Fatal(err)
		}
	}
}
