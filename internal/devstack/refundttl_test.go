package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	idemstream "github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/stream"
)

// refundFaults are fault switches in front of the provider simulator, inside
// its function URL: what the api's, the reconciler's and the test's own calls
// reach.
type refundFaults struct {
	next http.Handler
	// lookupsDown answers every look-up of a refund by its idempotency key
	// (the reconciler's question) 503, as a provider outage would.
	lookupsDown atomic.Bool
	// swallow keeps every refund request from the provider, and answers
	// nothing until its caller gives up: the request is lost on its way,
	// nothing refunded, and its caller cannot tell.
	swallow atomic.Bool
	// failedLookUps counts the look-ups answered 503.
	failedLookUps atomic.Int64
}

func (f *refundFaults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/refunds" && r.Method == http.MethodGet && r.URL.Query().Has("idempotency_key") && f.lookupsDown.Load():
		f.failedLookUps.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error": {"type": "api_error", "code": "unavailable", "message": "down"}}`))
	case r.URL.Path == "/v1/refunds" && r.Method == http.MethodPost && f.swallow.Load():
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	default:
		f.next.ServeHTTP(w, r)
	}
}

// removals reads a table's stream from its start, as a mapping of its own,
// and keeps its REMOVE records by key: whether each was made by DynamoDB's
// TTL process (its userIdentity), in order.
type removals struct {
	mu    sync.Mutex
	byTTL map[string][]bool
}

func (r *removals) handle(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range ev.Records {
		c := idemstream.NewChange(rec)
		if c.EventName == events.DynamoDBOperationTypeRemove {
			pk := rec.Change.Keys[dynamo.AttrPK].String()
			r.byTTL[pk] = append(r.byTTL[pk], c.ByTTL())
		}
	}
	return events.DynamoDBEventResponse{}, nil
}

// of returns the removals of the item pk so far.
func (r *removals) of(pk string) []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.byTTL[pk]...)
}

// TestRefundHoldSurvivesTTL: two refunds go UNKNOWN, each holding its
// amount on its payment: the provider refunded one and held its answer past
// ONCE_PROVIDER_TIMEOUT (tok_refundTimeout); the other never reached the
// provider. The provider cannot answer the reconciler's look-ups, so the
// records stay UNKNOWN, written without a TTL attribute: DynamoDB's TTL
// never deletes an UNKNOWN record. The test then gives them one already
// past, as an UNKNOWN item written before UNKNOWN records lost it carries
// (its expiry, ONCE_RETENTION after it went UNKNOWN), and DynamoDB Local's
// TTL deletes them (a REMOVE with the TTL service's userIdentity on the
// real stream). The sweeper, run from
// the stream by the devstack's poller behind the template's filter,
// restores each as UNKNOWN under a new lease token, the holds untouched;
// with the provider back, the reconciler resolves them: the refund made is
// completed, its hold consumed into amount_refunded, and a client retry
// replays its 201; the refund never made is released and its hold given
// back. Counts, at the provider and on the payments: one refund in all,
// nothing held, nothing lost.
func TestRefundHoldSurvivesTTL(t *testing.T) {
	_, out, faults, stack := startRefundStack(t)
	cfg := stack.Config()
	client := dynamotest.Client(t)
	store := dynamo.New(client, cfg.Table("IdempotencyTable"))
	table := payments.NewTable(client, cfg.Table("PaymentsTable"))
	pc := provider.New(cfg.ProviderURL, stack.ProviderClient())
	removed := &removals{byTTL: map[string][]bool{}}
	watch, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t), DB: client, Table: cfg.Table("IdempotencyTable"), Name: "test-removals",
		Handler: removed.handle, PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, watch)

	const amount = 1000
	type refund struct {
		name, source string
		amount       int64
		swallowed    bool
		key          string
		payment      string
		first        idempotency.Record // the record as it went UNKNOWN
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	refunds := []*refund{
		{name: "refunded, answer lost", source: "tok_refundTimeout", amount: 600},
		{name: "never reached the provider", source: "tok_visa", amount: 400, swallowed: true},
	}
	for i, r := range refunds {
		r.key = fmt.Sprintf("refund-ttl-%s-%d", run, i)
		r.payment = succeededPayment(t, stack.URL(), "payment-"+r.key, r.source, amount)
	}

	faults.lookupsDown.Store(true)
	for _, r := range refunds {
		faults.swallow.Store(r.swallowed)
		got := send(t, stack.URL(), "/v1/refunds", r.key, "", fmt.Sprintf(`{"payment": %q, "amount": %d}`, r.payment, r.amount))
		faults.swallow.Store(false)
		if got.status != http.StatusGatewayTimeout {
			t.Fatalf("%s: POST /v1/refunds = %d %s, want 504 (outcome unknown)", r.name, got.status, got.body)
		}
		rec, err := store.Get(t.Context(), idempotency.NewKey("acme", r.key))
		if err != nil || rec.Status != idempotency.StatusUnknown {
			t.Fatalf("%s: record = %s, %v; want UNKNOWN", r.name, rec.Status, err)
		}
		r.first = rec
		wantHeld(t, table, r.payment, r.key, r.amount, amount-r.amount)
		if ttl, ok := dynamotest.Item(t, client, cfg.Table("IdempotencyTable"), rec.Key.ID())[dynamo.AttrExpiresAt]; ok {
			t.Errorf("%s: the UNKNOWN record carries %s = %v, want none", r.name, dynamo.AttrExpiresAt, ttl)
		}
	}

	// Make them legacy items, their TTL past, as ONCE_RETENTION would have
	// left it; DynamoDB Local's TTL deletes them within seconds.
	expired := time.Now()
	for _, r := range refunds {
		_, err := client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:           aws.String(cfg.Table("IdempotencyTable")),
			Key:                 map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: r.first.Key.ID()}},
			UpdateExpression:    aws.String("SET #ttl = :past"),
			ConditionExpression: aws.String("#status = :unknown AND #token = :token"),
			ExpressionAttributeNames: map[string]string{
				"#ttl": dynamo.AttrExpiresAt, "#status": dynamo.AttrStatus, "#token": dynamo.AttrLeaseToken,
			},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":past":    &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)},
				":unknown": &types.AttributeValueMemberS{Value: string(idempotency.StatusUnknown)},
				":token":   &types.AttributeValueMemberS{Value: r.first.LeaseToken},
			},
		})
		if err != nil {
			t.Fatalf("%s: expire the record: %v", r.name, err)
		}
	}

	// Deleted by TTL and restored by the sweeper: UNKNOWN again, under a new
	// lease token, the request and its fingerprint kept, the holds too.
	for _, r := range refunds {
		deadline := time.Now().Add(90 * time.Second)
		for {
			rec, err := store.Get(t.Context(), r.first.Key)
			if err == nil && rec.LeaseToken != r.first.LeaseToken {
				if rec.Status != idempotency.StatusUnknown || rec.Fingerprint != r.first.Fingerprint || string(rec.Request) != string(r.first.Request) {
					t.Fatalf("%s: restored record = %s (fingerprint kept %v, request kept %v), want UNKNOWN with the request", r.name,
						rec.Status, rec.Fingerprint == r.first.Fingerprint, string(rec.Request) == string(r.first.Request))
				}
				t.Logf("%s: restored %v after its expiry", r.name, time.Since(expired).Round(100*time.Millisecond))
				break
			}
			if err != nil && !errors.Is(err, idempotency.ErrNotFound) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: record not restored 90s after its expiry: %s, %v", r.name, rec.Status, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		wantHeld(t, table, r.payment, r.key, r.amount, amount-r.amount)
		lambdatest.WaitFor(t, 10*time.Second, "the TTL's removal on the stream", func() bool { return len(removed.of(r.first.Key.ID())) > 0 })
		if got := removed.of(r.first.Key.ID()); !slices.Equal(got, []bool{true}) {
			t.Errorf("%s: REMOVE records on the stream by TTL %v, want one, by TTL (userIdentity Service dynamodb.amazonaws.com)", r.name, got)
		}
	}
	if n := lambdatest.CountsAmong(out.String())["reconcile_scheduled"]; n < len(refunds) {
		t.Errorf("sweeper reconcile_scheduled = %d, want at least %d (one per TTL deletion)", n, len(refunds))
	}
	if faults.failedLookUps.Load() == 0 {
		t.Error("the reconciler never tried a look-up while the provider was down: the test did not keep it from resolving")
	}

	faults.lookupsDown.Store(false)
	deadline := time.Now().Add(90 * time.Second)
	for _, r := range refunds {
		for {
			rec, err := store.Get(t.Context(), r.first.Key)
			p, perr := table.Get(t.Context(), "acme", r.payment)
			if perr != nil {
				t.Fatal(perr)
			}
			resolved := len(p.Holds) == 0 && (r.swallowed && errors.Is(err, idempotency.ErrNotFound) || !r.swallowed && err == nil && rec.Status == idempotency.StatusCompleted)
			if resolved {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not resolved 90s after the provider came back: record %s %v, holds %v", r.name, rec.Status, err, p.Holds)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	for _, r := range refunds {
		p, err := table.Get(t.Context(), "acme", r.payment)
		if err != nil {
			t.Fatal(err)
		}
		want := r.amount
		if r.swallowed {
			want = 0
		}
		if atProvider, n := refunded(t, pc, p.ProviderChargeID); atProvider != want || n != min(int(want), 1) {
			t.Errorf("%s: the provider refunded %d in %d refunds, want %d in %d", r.name, atProvider, n, want, min(int(want), 1))
		}
		if p.AmountRefunded != want || p.Refundable != amount-want || len(p.Holds) != 0 {
			t.Errorf("%s: payment refunded %d, refundable %d, holds %v; want %d, %d, none", r.name, p.AmountRefunded, p.Refundable, p.Holds, want, amount-want)
		}
		wantRemovals := []bool{true} // the TTL's, the refund completed
		if r.swallowed {
			wantRemovals = []bool{true, false} // the TTL's, then the reconciler's release
		}
		lambdatest.WaitFor(t, 10*time.Second, "the removals on the stream", func() bool { return len(removed.of(r.first.Key.ID())) >= len(wantRemovals) })
		if got := removed.of(r.first.Key.ID()); !slices.Equal(got, wantRemovals) {
			t.Errorf("%s: REMOVE records by TTL %v, want %v", r.name, got, wantRemovals)
		}
		if r.swallowed {
			continue
		}
		again := send(t, stack.URL(), "/v1/refunds", r.key, "", fmt.Sprintf(`{"payment": %q, "amount": %d}`, r.payment, r.amount))
		var body struct {
			Amount int64  `json:"amount"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(again.body), &body); err != nil || again.status != http.StatusCreated ||
			again.header.Get("Idempotent-Replayed") != "true" || body.Amount != r.amount {
			t.Errorf("%s: retry = %d (replayed %q) %s, want the refund's 201 replayed", r.name, again.status, again.header.Get("Idempotent-Replayed"), again.body)
		}
	}
	if _, n := refunded(t, pc, mustPayment(t, table, refunds[0].payment).ProviderChargeID); n != 1 {
		t.Errorf("after the retry: the provider holds %d refunds of the charge, want 1", n)
	}
}

// wantHeld fails the test unless payment holds amount for key (and nothing
// else) and has refundable left, nothing refunded.
func wantHeld(t *testing.T, table *payments.Table, payment, key string, amount, refundable int64) {
	t.Helper()
	p := mustPayment(t, table, payment)
	hash := idempotency.NewKey("acme", key).Hash
	if len(p.Holds) != 1 || p.Holds[hash] != amount || p.Refundable != refundable || p.AmountRefunded != 0 {
		t.Fatalf("payment %s: holds %v, refundable %d, refunded %d; want %d held for the key, %d refundable, 0 refunded",
			payment, p.Holds, p.Refundable, p.AmountRefunded, amount, refundable)
	}
}

// mustPayment returns acme's payment id as stored now.
func mustPayment(t *testing.T, table *payments.Table, id string) payments.Payment {
	t.Helper()
	p, err := table.Get(t.Context(), "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startRefundStack starts the devstack of the refund-recovery tests: a 2s
// lease, a 1s provider timeout and settle, info logs into out (shown when
// the test fails), and faults in front of the provider. It returns the
// stack's environment too.
func startRefundStack(t *testing.T) (map[string]string, *lambdatest.Buffer, *refundFaults, *devstack.Stack) {
	t.Helper()
	env := testEnv(t)
	env["ONCE_LEASE"] = "2s"
	env["ONCE_PROVIDER_TIMEOUT"] = "1s"
	env["ONCE_PROVIDER_SETTLE"] = "1s"
	env["LOG_LEVEL"] = "info"
	out := &lambdatest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
	faults := &refundFaults{}
	stack := startWrapped(t, env, out, func(h http.Handler) http.Handler {
		faults.next = h
		return faults
	})
	return env, out, faults, stack
}
