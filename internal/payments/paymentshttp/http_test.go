package paymentshttp

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/payments"
)

func TestEffect(t *testing.T) {
	p := payments.New("acme", payments.Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Source: "tok_visa"}, time.Unix(1700000000, 5))
	e, ok := Effect("payments-table", p).(dynamo.Put)
	if !ok || e.Table != "payments-table" || e.Item.(payments.Payment).PK != "acme#"+p.ID || e.Condition != "attribute_not_exists(#insert_key)" || e.Names["#insert_key"] != "pk" {
		t.Errorf("Effect() = %+v, want an insert into payments-table under pk = acme#%s", e, p.ID)
	}
}

// TestNotFoundIsOneAnswer: a missing payment answers exactly as a missing
// route or a malformed payment ID (httpapi.ErrNotFound), although payments
// declares its own error so as not to link the HTTP layer.
func TestNotFoundIsOneAnswer(t *testing.T) {
	if diff := cmp.Diff(problem.For(httpapi.ErrNotFound), problem.For(payments.ErrNotFound)); diff != "" {
		t.Errorf("problem.For(payments.ErrNotFound) mismatch (-httpapi.ErrNotFound +got):\n%s", diff)
	}
}
