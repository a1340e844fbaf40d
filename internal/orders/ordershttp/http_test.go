package ordershttp

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/orders"
)

// TestNotFoundIsOneAnswer: a missing order answers exactly as a missing
// route or a malformed order ID (httpapi.ErrNotFound), although orders
// declares its own error so as not to link the HTTP layer.
func TestNotFoundIsOneAnswer(t *testing.T) {
	if diff := cmp.Diff(problem.For(httpapi.ErrNotFound), problem.For(orders.ErrNotFound)); diff != "" {
		t.Errorf("problem.For(orders.ErrNotFound) mismatch (-httpapi.ErrNotFound +got):\n%s", diff)
	}
}
