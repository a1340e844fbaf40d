package operator_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/sqsmapping"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/worker"
)

// Strings of a payment that a listing must never show.
const (
	secretCustomer    = "cus_secret_42"
	secretDescription = "a private note"
	secretMetadata    = "private-metadata-value"
)

// payment writes tenant's pending payment of source, created ago, as the
// API does; padding adds an attribute of that many bytes.
func (e *env) payment(t *testing.T, tenant, source string, ago time.Duration, padding int) payments.Payment {
	t.Helper()
	p := payments.New(tenant, payments.Request{
		Amount: 2500, Currency: "eur", Customer: secretCustomer, Description: secretDescription,
		Metadata: map[string]string{"note": secretMetadata}, Source: source,
	}, time.Now().Add(-ago))
	e.putPayment(t, p, padding)
	return p
}

// putPayment writes p as it is, with padding bytes in an extra attribute.
func (e *env) putPayment(t *testing.T, p payments.Payment, padding int) {
	t.Helper()
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		t.Fatal(err)
	}
	if padding > 0 {
		item["padding"] = &dynamodbtypes.AttributeValueMemberS{Value: strings.Repeat("x", padding)}
	}
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{
		TableName: aws.String(e.names.ByLogicalID["PaymentsTable"]), Item: item,
	}); err != nil {
		t.Fatal(err)
	}
}

// pendingIDs runs oncectl pending -json args and returns the payments
// listed, in order.
func (e *env) pendingIDs(t *testing.T, args ...string) []string {
	t.Helper()
	code, out, errOut := e.run(t, append([]string{"pending", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("pending %v = exit %d: %s", args, code, errOut)
	}
	var got []string
	for line := range strings.Lines(out) {
		var s struct {
			Payment, Tenant, ID string
			Created             time.Time `json:"created"`
			WindowEnds          time.Time `json:"retry_window_ends"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if s.Payment != s.Tenant+"#"+s.ID || !s.WindowEnds.Equal(s.Created.Add(config.DefaultWorkerRetryWindow)) {
			t.Errorf("line %q: want payment tenant#id and the retry window's end %v after creation", line, config.DefaultWorkerRetryWindow)
		}
		got = append(got, s.Payment)
	}
	return got
}

func TestPending(t *testing.T) {
	e := newEnv(t)
	older := e.payment(t, "acme", simulator.TokenVisa, 2*time.Hour, 0)
	old := e.payment(t, "acme", simulator.TokenVisa, time.Hour, 0)
	other := e.payment(t, "globex", simulator.TokenVisa, 30*time.Minute, 0)
	recent := e.payment(t, "acme", simulator.TokenVisa, time.Minute, 0)
	settled := e.payment(t, "acme", simulator.TokenVisa, 3*time.Hour, 0)
	settled.Status, settled.ProviderChargeID = payments.StatusSucceeded, "ch_1"
	e.putPayment(t, settled, 0)
	tests := []struct {
		args []string
		want []payments.Payment // in order
	}{
		{nil, []payments.Payment{older, old, other}}, // -older-than 10m
		{[]string{"-older-than", "90m"}, []payments.Payment{older}},
		{[]string{"-tenant", "acme"}, []payments.Payment{older, old}},
		{[]string{"-limit", "1"}, []payments.Payment{older}},
		{[]string{"-older-than", "0s"}, []payments.Payment{older, old, other, recent}},
		{[]string{"-older-than", "45m", "-tenant", "globex"}, nil},
	}
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			var want []string
			for _, p := range tt.want {
				want = append(want, p.PK)
			}
			if diff := cmp.Diff(want, e.pendingIDs(t, tt.args...)); diff != "" {
				t.Errorf("payments (-want +got):\n%s", diff)
			}
		})
	}
	code, out, errOut := e.run(t, "pending")
	if code != 0 || !strings.Contains(out, "PAYMENT") || !strings.Contains(out, older.PK) || !strings.Contains(errOut, "3 pending payment(s)") {
		t.Errorf("table output = %d %q %q, want a header, the payments and their count", code, out, errOut)
	}
	_, jsonOut, _ := e.run(t, "pending", "-json")
	for _, s := range []string{secretCustomer, secretDescription, secretMetadata, simulator.TokenVisa} {
		if strings.Contains(out+jsonOut, s) {
			t.Errorf("the listing shows %q, a payment's private field:\n%s%s", s, out, jsonOut)
		}
	}
	for _, args := range [][]string{{"pending", "-limit", "0"}, {"pending", "-older-than", "-1m"}, {"pending", "extra"}} {
		if code, _, _ := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d, want 2", args, code)
		}
	}
}

// TestPendingOldestAcrossPages: -limit lists the oldest pending payments of
// the whole table, not of the first Scan pages; and when the page bound cuts
// the Scan, the listing says so. Six payments of about 300 KB take more than
// one 1 MB page; the one the Scan reads last is made the oldest.
func TestPendingOldestAcrossPages(t *testing.T) {
	e := newEnv(t)
	byPK := map[string]payments.Payment{}
	for range 6 {
		p := e.payment(t, "acme", simulator.TokenVisa, time.Hour, 300<<10)
		byPK[p.PK] = p
	}
	order, pages := e.scanOrder(t, "PaymentsTable")
	if pages < 2 || len(order) != 6 {
		t.Fatalf("the table is %d payments in %d Scan pages, want 6 in 2 or more", len(order), pages)
	}
	last := byPK[order[len(order)-1]]
	last.Created = last.Created.Add(-time.Hour)
	e.putPayment(t, last, 300<<10)
	if diff := cmp.Diff([]string{last.PK}, e.pendingIDs(t, "-limit", "1")); diff != "" {
		t.Errorf("pending -limit 1, want the oldest, read last (-want +got):\n%s", diff)
	}

	// One page only: the listing is of the first page's payments, and says
	// so.
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	tool := operator.New(cfg, e.db, e.sqs, &out, &errOut)
	operator.SetScanPages(tool, 1)
	if code := tool.Run(t.Context(), []string{"pending", "-json"}); code != 0 {
		t.Fatalf("pending = exit %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), "\n"); n < 1 || n >= 6 {
		t.Errorf("pending with one Scan page listed %d payments, want those of the first page", n)
	}
	if !strings.Contains(errOut.String(), "warning: the Scan stopped after 1 pages") {
		t.Errorf("pending with one Scan page: stderr %q, want the warning", errOut.String())
	}
}

// retrier is the worker's retry function on e's retry queue, charging at a
// provider simulator on e's ProviderTable.
type retrier struct {
	e        *env
	sim      *simulator.Server
	provider *provider.Client
	table    *payments.Table
	url      string
}

// callTimeout is the retrier's ONCE_PROVIDER_SETTLE: short, so that a
// look-up after the window comes soon.
const callTimeout = time.Second

// retrier returns e's retrier, not yet consuming the queue (run).
func (e *env) retrier(t *testing.T) *retrier {
	t.Helper()
	r := &retrier{e: e, url: e.urls[config.EnvWorkerRetryQueue]}
	r.sim = simulator.New(simulator.Options{DB: e.db, Table: e.names.ByLogicalID["ProviderTable"]})
	srv := httptest.NewServer(r.sim)
	t.Cleanup(srv.Close)
	r.provider = provider.New(srv.URL, &http.Client{Timeout: 5 * time.Second})
	r.table = payments.NewTable(e.db, e.names.ByLogicalID["PaymentsTable"])
	return r
}

// run starts the retrier's event source mapping.
func (r *retrier) run(t *testing.T) {
	t.Helper()
	w, err := worker.New(worker.Config{
		Charger: r.provider, Settler: r.table, Retries: sqstest.Sender(t, r.e.sqs, r.url),
		RetryWindow: config.DefaultWorkerRetryWindow, CallTimeout: callTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sqsmapping.New(sqsmapping.Options{
		Client: r.e.sqs, QueueURL: r.url, Handler: w.HandleRetries, ReportBatchItemFailures: true,
		WaitTime: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)
}

// charge charges p at the provider under its worker key, as a worker
// attempt that charged and then could not settle did.
func (r *retrier) charge(t *testing.T, p payments.Payment) provider.Charge {
	t.Helper()
	ch, err := r.provider.Charge(t.Context(), worker.ChargeKey(p.Tenant, p.ID), worker.ChargeRequest(p))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// charges counts every charge the provider made, under any key.
func (r *retrier) charges(t *testing.T) int {
	t.Helper()
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(r.e.names.ByLogicalID["ProviderTable"]),
		FilterExpression:          aws.String("kind = :charge"),
		ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":charge": &dynamodbtypes.AttributeValueMemberS{Value: "charge"}},
	}
	n := 0
	for {
		out, err := r.e.db.Scan(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range out.Items {
			var c struct {
				Count int `dynamodbav:"charge_count"`
			}
			if err := attributevalue.UnmarshalMap(item, &c); err != nil {
				t.Fatal(err)
			}
			n += c.Count
		}
		if len(out.LastEvaluatedKey) == 0 {
			return n
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// settled waits until p is settled and the retry queue is empty, and
// returns p as stored.
func (r *retrier) settled(t *testing.T, p payments.Payment) payments.Payment {
	t.Helper()
	var got payments.Payment
	lambdatest.WaitFor(t, 30*time.Second, "the payment settled and the retry queue empty", func() bool {
		var err error
		if got, err = r.table.Get(t.Context(), p.Tenant, p.ID); err != nil {
			t.Fatal(err)
		}
		v, f, d := sqstest.Counts(t, r.e.sqs, r.url)
		return got.Status != payments.StatusPending && v+f+d == "000"
	})
	return got
}

// requeue runs oncectl requeue-payment p and checks that it either sent p
// or refused it as settled meanwhile (a racing requeue's retry may have
// settled it); it reports whether p was sent.
func (e *env) requeue(t *testing.T, p payments.Payment) bool {
	t.Helper()
	code, out, errOut := e.run(t, "requeue-payment", p.PK)
	switch {
	case code == 0 && strings.Contains(out, p.PK+" requeued"):
		return true
	case code == 1 && strings.Contains(errOut, "not pending"):
		return false
	}
	t.Errorf("requeue-payment %s = exit %d %q %q, want it sent or refused as settled", p.PK, code, out, errOut)
	return false
}

// TestRequeuePayment hands pending payments to the retrier with oncectl,
// twice each and in races, with the retrier on the local SQS charging at the
// provider simulator on DynamoDB Local: every payment ends settled, charged
// at most once (counted over every key of the provider), as the provider's
// record says.
func TestRequeuePayment(t *testing.T) {
	tests := []struct {
		name   string
		source string
		ago    time.Duration // the payment's age
		// charged: an earlier attempt charged (and could not settle).
		charged     bool
		race        bool
		wantStatus  payments.Status
		wantFailure string
		wantCharges int
	}{
		{name: "in its window, charged before, requeued twice", source: simulator.TokenVisa, ago: time.Hour, charged: true,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "in its window, charged before, racing requeues", source: simulator.TokenVisa, ago: time.Hour, charged: true, race: true,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "in its window, never charged, requeued twice", source: simulator.TokenVisa, ago: time.Hour,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "in its window, never charged, racing requeues", source: simulator.TokenVisa, ago: time.Hour, race: true,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "in its window, declined", source: simulator.TokenDeclined, ago: time.Hour, race: true,
			wantStatus: payments.StatusFailed, wantFailure: "card_declined", wantCharges: 1},
		// After the window the retrier charges no more: it looks the
		// charge up, because the requeue says an attempt may have charged.
		{name: "window over, charged before, requeued twice", source: simulator.TokenVisa, ago: 7 * time.Hour, charged: true,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "window over, charged before, racing requeues", source: simulator.TokenVisa, ago: 7 * time.Hour, charged: true, race: true,
			wantStatus: payments.StatusSucceeded, wantCharges: 1},
		{name: "window over, never charged", source: simulator.TokenVisa, ago: 7 * time.Hour,
			wantStatus: payments.StatusFailed, wantFailure: "provider_unavailable", wantCharges: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r := e.retrier(t)
			p := e.payment(t, "acme", tt.source, tt.ago, 0)
			var earlier provider.Charge
			if tt.charged {
				earlier = r.charge(t, p)
			}
			if tt.race {
				r.run(t)
				var wg sync.WaitGroup
				sent := make(chan bool, 2)
				for range 2 {
					wg.Go(func() { sent <- e.requeue(t, p) })
				}
				wg.Wait()
				if !<-sent && !<-sent {
					t.Error("neither racing requeue sent the payment")
				}
			} else {
				// Both sent before the retrier runs: two messages for the
				// same payment.
				for range 2 {
					if !e.requeue(t, p) {
						t.Fatal("requeue of a pending payment refused")
					}
				}
				if v, _, _ := sqstest.Counts(t, e.sqs, r.url); v != "2" {
					t.Fatalf("retry queue holds %s messages, want 2", v)
				}
				r.run(t)
			}
			got := r.settled(t, p)
			if n := r.charges(t); n != tt.wantCharges {
				t.Errorf("provider charges = %d, want %d", n, tt.wantCharges)
			}
			if got.Status != tt.wantStatus || got.FailureCode != tt.wantFailure {
				t.Errorf("payment = %s (%q), want %s (%q)", got.Status, got.FailureCode, tt.wantStatus, tt.wantFailure)
			}
			if tt.charged && got.ProviderChargeID != earlier.ID {
				t.Errorf("payment's charge = %q, want the earlier attempt's %q", got.ProviderChargeID, earlier.ID)
			}
			// Settled: a further requeue is refused, and sends nothing.
			code, _, errOut := e.run(t, "requeue-payment", p.PK)
			if code != 1 || !strings.Contains(errOut, "not pending") {
				t.Errorf("requeue-payment of a settled payment = exit %d %q, want 1 saying it is not pending", code, errOut)
			}
			if v, f, d := sqstest.Counts(t, e.sqs, r.url); v+f+d != "000" {
				t.Errorf("retry queue after a refused requeue: %s visible, %s in flight, %s delayed; want empty", v, f, d)
			}
		})
	}
}

// TestRequeuePaymentMessage checks the message sent: the worker's own
// shape, one attempt made, and an attempt that may have charged, made at the
// requeue.
func TestRequeuePaymentMessage(t *testing.T) {
	e := newEnv(t)
	p := e.payment(t, "acme", simulator.TokenVisa, time.Hour, 0)
	q := e.payment(t, "globex", simulator.TokenVisa, time.Hour, 0)
	before := time.Now()
	code, out, errOut := e.run(t, "requeue-payment", p.PK, q.PK)
	after := time.Now()
	if code != 0 || strings.Count(out, "requeued") != 2 {
		t.Fatalf("requeue-payment = exit %d %q %q", code, out, errOut)
	}
	msgs := sqstest.Receive(t, e.sqs, e.urls[config.EnvWorkerRetryQueue], 0, false)
	if len(msgs) != 2 {
		t.Fatalf("%d messages on the retry queue, want 2", len(msgs))
	}
	got := map[string]bool{}
	for _, m := range msgs {
		var rm struct {
			Tenant, Payment string
			Attempt         int
			Unknown         time.Time
		}
		body := aws.ToString(m.Body)
		if err := json.Unmarshal([]byte(body), &rm); err != nil {
			t.Fatal(err)
		}
		if rm.Attempt != 1 || rm.Unknown.Before(before.Truncate(time.Second)) || rm.Unknown.After(after) {
			t.Errorf("message %s: attempt %d, unknown %v; want 1, and an attempt that may have charged at the requeue (%v to %v)", body, rm.Attempt, rm.Unknown, before, after)
		}
		if want, err := worker.RetryBody(rm.Tenant, rm.Payment, rm.Attempt, rm.Unknown); err != nil || body != want {
			t.Errorf("message %s, want the worker's %s (%v)", body, want, err)
		}
		got[rm.Tenant+"#"+rm.Payment] = true
	}
	if diff := cmp.Diff(map[string]bool{p.PK: true, q.PK: true}, got); diff != "" {
		t.Errorf("payments sent (-want +got):\n%s", diff)
	}

	// A missing payment fails with the others still sent; a malformed one is
	// a usage error, with nothing sent.
	missing := "acme#" + payments.NewID()
	code, out, errOut = e.run(t, "requeue-payment", missing, p.PK)
	if code != 1 || !strings.Contains(errOut, "no payment "+missing) || !strings.Contains(out, p.PK+" requeued") {
		t.Errorf("requeue-payment of a missing payment and another = exit %d %q %q, want 1 naming it, the other sent", code, out, errOut)
	}
	sqstest.Receive(t, e.sqs, e.urls[config.EnvWorkerRetryQueue], 0, false)
	for _, args := range [][]string{
		{"requeue-payment"}, {"requeue-payment", "pay_x"}, {"requeue-payment", p.ID},
		{"requeue-payment", "Not A Tenant#" + p.ID}, {"requeue-payment", p.PK, "acme#nope"},
	} {
		if code, _, _ := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d, want 2", args, code)
		}
	}
	if v, f, d := sqstest.Counts(t, e.sqs, e.urls[config.EnvWorkerRetryQueue]); v+f+d != "000" {
		t.Errorf("retry queue after usage errors: %s visible, %s in flight, %s delayed; want empty", v, f, d)
	}
}
