package devstack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// succeededPayment creates acme's payment of amount charged with source, and
// waits for the worker, run from the payments stream, to settle it
// succeeded.
func succeededPayment(t *testing.T, base, key, source string, amount int64) string {
	t.Helper()
	body := fmt.Sprintf(`{"amount": %d, "currency": "EUR", "customer": "cus_1", "source": %q}`, amount, source)
	created := send(t, base, "/v1/payments", key, "", body)
	if created.status != http.StatusCreated {
		t.Fatalf("create = %d %s", created.status, created.body)
	}
	var p struct{ ID string }
	if err := json.Unmarshal([]byte(created.body), &p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := call(t, "GET", base+"/v1/payments/"+p.ID, "sk_test_acme", "", "")
		if strings.Contains(r.body, `"status":"succeeded"`) {
			return p.ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment %s = %d %s after 30s, want succeeded", p.ID, r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRefundRecoveryMatrix crashes or confuses a refund at every fault
// point, whatever the provider does with it, then retries as a client
// would, with the worker, sweeper and reconciler running from the streams
// as in AWS. Whatever happened, the provider refunded at most once, the
// payment's amount_refunded is what it refunded, nothing is left held, and
// every later retry gets the same answer.
func TestRefundRecoveryMatrix(t *testing.T) {
	stack, out, store := startRecovery(t)
	cfg := stack.Config()
	client := dynamotest.Client(t)
	table := payments.NewTable(client, cfg.Table("PaymentsTable"))
	pc := provider.New(cfg.ProviderURL, stack.ProviderClient())

	type final struct {
		status   int
		code     string // problem code, for errors
		refunded int64  // at the provider, and the payment's amount_refunded
		record   string // idempotency record status, "" when absent
	}
	const amount, refund = 1000, 600
	outcomes := map[string]final{
		"tok_visa":              {status: http.StatusCreated, refunded: refund, record: string(idempotency.StatusCompleted)},
		"tok_refundUnavailable": {status: http.StatusServiceUnavailable, code: "provider_unavailable"},
		// The provider refunds and holds its answer past ONCE_PROVIDER_TIMEOUT
		// (tok_refundTimeout) or answers after it (tok_refundSlow, 3s): the
		// api answers 504, and the reconciler finds the refund.
		"tok_refundTimeout": {status: http.StatusCreated, refunded: refund, record: string(idempotency.StatusCompleted)},
		"tok_refundSlow":    {status: http.StatusCreated, refunded: refund, record: string(idempotency.StatusCompleted)},
	}
	faults := []string{"", "after-reserve", "after-provider-call", "after-complete"}
	run := fmt.Sprint(time.Now().UnixNano())
	for source, want := range outcomes {
		for _, fault := range faults {
			name := source + "/" + fault
			if fault == "" {
				name = source + "/no-fault"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("refund-matrix-%s-%s-%s", run, source, fault)
				id := succeededPayment(t, stack.URL(), "payment-"+key, source, amount)
				body := fmt.Sprintf(`{"payment": %q, "amount": %d}`, id, refund)
				// after-complete is reached only when a response is stored:
				// not for 503 (released) nor 504 (left UNKNOWN).
				crashes := fault != "" && (fault != "after-complete" || source == "tok_visa")
				crashAndSettle(t, stack.URL(), "/v1/refunds", key, fault, body, crashes, settledAs{want.status, want.code, want.record != ""})

				p, err := table.Get(t.Context(), "acme", id)
				if err != nil {
					t.Fatal(err)
				}
				if atProvider, n := refunded(t, pc, p.ProviderChargeID); atProvider != want.refunded || n > 1 {
					t.Errorf("the provider refunded %d in %d refunds, want %d in at most one", atProvider, n, want.refunded)
				}
				if p.AmountRefunded != want.refunded || p.Refundable != amount-want.refunded || len(p.Holds) != 0 {
					t.Errorf("payment: refunded %d, refundable %d, holds %v; want %d, %d, none",
						p.AmountRefunded, p.Refundable, p.Holds, want.refunded, amount-want.refunded)
				}
				rec, err := store.Get(t.Context(), idempotency.NewKey("acme", key))
				switch {
				case want.record == "" && !errors.Is(err, idempotency.ErrNotFound):
					t.Errorf("record = %+v, %v; want none (released)", rec.Status, err)
				case want.record != "" && (err != nil || string(rec.Status) != want.record):
					t.Errorf("record = %s, %v; want %s", rec.Status, err, want.record)
				}
			})
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
}

// refunded returns the sum and the number of the refunds the provider made
// of charge.
func refunded(t *testing.T, pc *provider.Client, charge string) (sum int64, n int) {
	t.Helper()
	rs, _, err := pc.Refunds(t.Context(), charge)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		sum += r.Amount
	}
	return sum, len(rs)
}
