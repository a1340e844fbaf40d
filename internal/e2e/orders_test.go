package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/reconciler"
)

// orderBody is a create-order body with the given source and e-mail.
func orderBody(source, email string) string {
	return fmt.Sprintf(`{"amount": 4200, "currency": "EUR", "customer": "cus_42", "email": %q, "description": "Order 2001", "metadata": {"order": "2001"}, "source": %q}`, email, source)
}

func newOrderStack(t *testing.T) *stack {
	t.Helper()
	return newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}))
}

// order sends POST /v1/orders for tenant under key.
func (s *stack) order(t testing.TB, tenant, key, body string, header map[string][]string) response {
	t.Helper()
	return s.do(t, request{path: "/v1/orders", tenant: tenant, keys: []string{key}, body: body, header: header})
}

// orderID is the ID of the order that body under tenant's raw key creates.
func orderID(t testing.TB, tenant, key, body string) string {
	t.Helper()
	fp, err := idempotency.RequestFingerprint(http.MethodPost, orders.RouteCreate, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return orders.ID(idempotency.NewKey(tenant, key), fp)
}

// orderForwardKey is the key the order of body under acme's raw key is
// charged with.
func orderForwardKey(t testing.TB, key, body string) string {
	t.Helper()
	fp, err := idempotency.RequestFingerprint(http.MethodPost, orders.RouteCreate, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.NewKey("acme", key).Forward(fp + "\x00" + orders.PointChargeCreated)
}

// scan returns every item of table, decoded into T.
func scan[T any](t testing.TB, s *stack, table string) []T {
	t.Helper()
	var out []T
	p := dynamodb.NewScanPaginator(s.client, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var items []T
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
			t.Fatal(err)
		}
		out = append(out, items...)
	}
	return out
}

// effects checks the orders, charges and receipt jobs of acme's key: one
// order in status, charged charges at the provider, and jobs receipt jobs.
func (s *stack) effects(t testing.TB, key, body string, status orders.Status, charged, jobs int) orders.Order {
	t.Helper()
	id := orderID(t, "acme", key, body)
	var found []orders.Order
	for _, o := range scan[orders.Order](t, s, s.names.ByLogicalID["OrdersTable"]) {
		if o.ID == id {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("orders %s = %d, want 1", id, len(found))
	}
	if found[0].Status != status {
		t.Errorf("order %s status = %s, want %s", id, found[0].Status, status)
	}
	n, err := s.sim.Count(t.Context(), orderForwardKey(t, key, body))
	if err != nil {
		t.Fatal(err)
	}
	if n != charged {
		t.Errorf("provider charges for %s = %d, want %d", key, n, charged)
	}
	var got int
	for _, j := range scan[outbox.Job](t, s, s.names.ByLogicalID["OutboxTable"]) {
		if j.Order == id {
			got++
		}
	}
	if got != jobs {
		t.Errorf("receipt jobs of %s = %d, want %d", id, got, jobs)
	}
	return found[0]
}

// TestOrdersContract walks POST /v1/orders and GET /v1/orders/{id} through
// their answers over the Lambda adapter, against DynamoDB Local and the
// provider simulator, counting DynamoDB calls at the HTTP transport.
func TestOrdersContract(t *testing.T) {
	s := newOrderStack(t)
	s.clock.Advance(time.Hour) // created comes from the recorded first phase, not the time of the answer

	t.Run("paid", func(t *testing.T) {
		const key = "order-paid"
		body := orderBody("tok_visa", "ada@example.com")
		s.calls.take()
		first := s.order(t, "acme", key, body, nil)
		if first.status != http.StatusCreated {
			t.Fatalf("POST = %d %s, want 201", first.status, first.body)
		}
		ops, n := s.calls.take()
		if n != 4 || ops["TransactWriteItems"] != 3 || ops["GetItem"] != 1 {
			t.Errorf("first order made %d DynamoDB calls %v, want 3 TransactWriteItems (one per phase) and the GetItem of the order before its charge", n, ops)
		}
		id := orderID(t, "acme", key, body)
		c, err := s.provider.Lookup(t.Context(), orderForwardKey(t, key, body))
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		want := map[string]any{
			"id": id, "object": "order", "amount": 4200.0, "currency": "eur", "customer": "cus_42", "email": "ada@example.com",
			"description": "Order 2001", "metadata": map[string]any{"order": "2001"}, "status": "paid", "charge": c.ID,
			"receipt": "queued", "created": float64(s.clock.Now().Unix()),
		}
		if diff := cmp.Diff(want, decode(t, first)); diff != "" {
			t.Errorf("body (-want +got):\n%s", diff)
		}
		if got := first.header.Get("Location"); got != "/v1/orders/"+id {
			t.Errorf("Location = %q, want /v1/orders/%s", got, id)
		}
		replay := s.order(t, "acme", key, body, nil)
		wantReplay(t, replay, first)
		if got := replay.header.Get("Location"); got != "/v1/orders/"+id {
			t.Errorf("replay Location = %q, want /v1/orders/%s", got, id)
		}
		if ops, n := s.calls.take(); n != 0 {
			t.Errorf("replay on the warm instance made %d DynamoDB calls %v, want 0 (its replay cache)", n, ops)
		}
		s.effects(t, key, body, orders.StatusPaid, 1, 1)
		rec, err := s.record(t, key)
		if err != nil || rec.Status != idempotency.StatusCompleted || rec.Point != orders.PointFinished || rec.Data["charge"] != c.ID {
			t.Errorf("record = %s at %q with %v, %v; want COMPLETED at finished with the charge", rec.Status, rec.Point, rec.Data, err)
		}

		got := s.do(t, request{method: http.MethodGet, path: "/v1/orders/" + id, tenant: "acme"})
		if got.status != http.StatusOK {
			t.Fatalf("GET = %d %s, want 200", got.status, got.body)
		}
		if ops, n := s.calls.take(); n != 1 || ops["GetItem"] != 1 {
			t.Errorf("GET made %d DynamoDB calls %v, want 1 GetItem", n, ops)
		}
		live := decode(t, got)
		wantLive := map[string]any{"status": "paid", "recovery_point": "finished", "receipt": "queued", "receipt_sent_at": nil, "charge": c.ID, "failure_code": nil}
		for k, v := range wantLive {
			if !cmp.Equal(live[k], v) {
				t.Errorf("GET %s = %v, want %v", k, live[k], v)
			}
		}
		if other := s.do(t, request{method: http.MethodGet, path: "/v1/orders/" + id, tenant: "globex"}); other.status != http.StatusNotFound {
			t.Errorf("GET by another tenant = %d %s, want 404", other.status, other.body)
		}

		// The same key with another body: 422, nothing written.
		s.calls.take()
		other := s.order(t, "acme", key, orderBody("tok_visa", "bob@example.com"), nil)
		wantProblem(t, other, http.StatusUnprocessableEntity, "idempotency_key_reused", "")
		if ops, n := s.calls.take(); n != 0 {
			t.Errorf("mismatch on the warm instance made %d DynamoDB calls %v, want 0 (its replay cache)", n, ops)
		}
		if n := len(scan[orders.Order](t, s, s.names.ByLogicalID["OrdersTable"])); n != 1 {
			t.Errorf("orders after the mismatch = %d, want 1", n)
		}
	})

	t.Run("declined", func(t *testing.T) {
		const key = "order-declined"
		body := orderBody("tok_chargeDeclined", "ada@example.com")
		first := s.order(t, "acme", key, body, nil)
		wantProblem(t, first, http.StatusPaymentRequired, "card_declined", "")
		wantReplay(t, s.order(t, "acme", key, body, nil), first)
		o := s.effects(t, key, body, orders.StatusFailed, 1, 0)
		if o.FailureCode != "card_declined" || o.RecoveryPoint != orders.PointFinished || o.Receipt != "" || o.Charge == "" {
			t.Errorf("order = %+v, want failed card_declined with its failed charge, finished, no receipt", o)
		}
	})

	t.Run("rejected by the provider", func(t *testing.T) {
		const key = "order-rejected"
		body := orderBody("tok_mastercard", "ada@example.com")
		first := s.order(t, "acme", key, body, nil)
		wantProblem(t, first, http.StatusUnprocessableEntity, "provider_rejected", "")
		wantReplay(t, s.order(t, "acme", key, body, nil), first)
		o := s.effects(t, key, body, orders.StatusFailed, 0, 0)
		if o.FailureCode != "provider_rejected" || o.RecoveryPoint != orders.PointFinished {
			t.Errorf("order = %+v, want failed provider_rejected, finished", o)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		for _, tt := range []struct{ body, field string }{
			{`{"amount": 4200, "currency": "EUR", "customer": "c", "source": "tok_visa", "email": "ada"}`, "email"},
			{`{"amount": 4200, "currency": "EUR", "customer": "c", "source": "tok_visa"}`, "email"},
			{`{"amount": 4200, "currency": "EUR", "customer": "c", "email": "ada@example.com"}`, "source"},
			{`{"amount": 0, "currency": "EUR", "customer": "c", "source": "tok_visa", "email": "ada@example.com"}`, "amount"},
		} {
			r := s.order(t, "acme", "order-invalid", tt.body, nil)
			if r.status != http.StatusBadRequest || problem(t, r)["field"] != tt.field {
				t.Errorf("POST %s = %d %s, want 400 naming %s", tt.body, r.status, r.body, tt.field)
			}
		}
		if _, err := s.record(t, "order-invalid"); err == nil {
			t.Errorf("a record for a refused request; want none (validation is not stored)")
		}
	})

	t.Run("provider unavailable", func(t *testing.T) {
		// Nothing was charged: 503, not stored; the lease is given up at
		// order_created, so the retry resumes there at once, on the same
		// order.
		const key = "order-unavailable"
		body := orderBody("tok_unavailable", "ada@example.com")
		s.calls.take()
		wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusServiceUnavailable, "provider_unavailable", "1")
		if ops, n := s.calls.take(); n != 3 || ops["TransactWriteItems"] != 1 || ops["GetItem"] != 1 || ops["UpdateItem"] != 1 {
			t.Errorf("503 made %d DynamoDB calls %v, want 3 (the reservation with the order, its read, the lease given up)", n, ops)
		}
		rec, err := s.record(t, key)
		if err != nil || rec.Status != idempotency.StatusInProgress || rec.Point != orders.PointOrderCreated || rec.ExpiresAt.After(s.clock.Now()) {
			t.Errorf("record = %s at %q until %v, %v; want IN_PROGRESS at order_created, its lease given up", rec.Status, rec.Point, rec.ExpiresAt, err)
		}
		wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusServiceUnavailable, "provider_unavailable", "1")
		if ops, n := s.calls.take(); n != 4 {
			t.Errorf("retry made %d DynamoDB calls %v, want 4 (reservation refused, lease taken over, the order read, given up)", n, ops)
		}
		s.effects(t, key, body, orders.StatusCreated, 0, 0)
	})

	t.Run("provider timeout", func(t *testing.T) {
		// The charge may exist: 504, the lease keeps running; the retry
		// after it resumes at order_created and calls the provider again
		// under the same forwarded key, which answers with its charge.
		const key = "order-timeout"
		body := orderBody("tok_timeout", "ada@example.com")
		s.calls.take()
		wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusGatewayTimeout, "provider_outcome_unknown", "2")
		if ops, n := s.calls.take(); n != 2 {
			t.Errorf("504 made %d DynamoDB calls %v, want 2 (the reservation with the order, its read)", n, ops)
		}
		wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "30")
		s.clock.Advance(s.cfg.Lease + time.Second)
		s.calls.take()
		r := s.order(t, "acme", key, body, nil)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after the lease = %d %s, want the resumed 201", r.status, r.body)
		}
		if ops, n := s.calls.take(); n != 5 {
			t.Errorf("resumed order made %d DynamoDB calls %v, want 5 (reservation refused, takeover, the order read, charge_created, finished)", n, ops)
		}
		s.effects(t, key, body, orders.StatusPaid, 1, 1)
	})

	t.Run("duplicate while a phase runs", func(t *testing.T) {
		const key = "order-slow"
		body := orderBody("tok_slow", "ada@example.com")
		var wg sync.WaitGroup
		var first response
		wg.Go(func() { first = s.order(t, "acme", key, body, nil) })
		time.Sleep(150 * time.Millisecond) // the simulator answers tok_slow after 300ms
		dup := s.order(t, "acme", key, body, nil)
		wg.Wait()
		if first.status != http.StatusCreated {
			t.Fatalf("first = %d %s, want 201", first.status, first.body)
		}
		wantProblem(t, dup, http.StatusConflict, "idempotency_request_in_progress", "30")
		wantReplay(t, s.order(t, "acme", key, body, nil), first)
		s.effects(t, key, body, orders.StatusPaid, 1, 1)
	})
}

// TestOrdersCrashPoints crashes an order at each recovery point (and after
// the provider call): a function error (errorType Crash), the record at the point, the
// DynamoDB calls each phase made; a retry within the lease gets 409, one
// after it resumes where the crash left the request, repeating no committed
// phase. One order, one charge and one receipt job in every case.
func TestOrdersCrashPoints(t *testing.T) {
	s := newOrderStack(t)
	tests := []struct {
		fault     string
		point     string             // the record's point after the crash
		status    idempotency.Status // its status
		calls     int                // DynamoDB calls of the crashed request
		charged   int                // provider charges after the crash
		orderAt   orders.Status      // the order's status after the crash
		resumeOps int                // DynamoDB calls of the retry after the lease
	}{
		// The phase charge_created reads the order first (a GetItem).
		{"after-order-created", orders.PointOrderCreated, idempotency.StatusInProgress, 1, 0, orders.StatusCreated, 5},
		{"after-provider-call", orders.PointOrderCreated, idempotency.StatusInProgress, 2, 1, orders.StatusCreated, 5},
		{"after-charge-created", orders.PointChargeCreated, idempotency.StatusInProgress, 3, 1, orders.StatusPaid, 3},
		{"after-finished", orders.PointFinished, idempotency.StatusCompleted, 4, 1, orders.StatusPaid, 0}, // a replay from the warm instance's cache
	}
	body := orderBody("tok_visa", "ada@example.com")
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			key := "order-crash-" + tt.fault
			s.calls.take()
			r := s.order(t, "acme", key, body, map[string][]string{"Once-Fault": {tt.fault}})
			wantCrash(t, r, tt.fault)
			ops, n := s.calls.take()
			t.Logf("%s: %d DynamoDB calls before the crash: %v", tt.fault, n, ops)
			if n != tt.calls {
				t.Errorf("crashed request made %d DynamoDB calls %v, want %d", n, ops, tt.calls)
			}
			rec, err := s.record(t, key)
			if err != nil || rec.Status != tt.status || rec.Point != tt.point {
				t.Fatalf("record = %s at %q, %v; want %s at %s", rec.Status, rec.Point, err, tt.status, tt.point)
			}
			o := s.effects(t, key, body, tt.orderAt, tt.charged, map[bool]int{true: 1}[tt.status == idempotency.StatusCompleted])
			if o.RecoveryPoint != tt.point {
				t.Errorf("order recovery_point = %q, want %q", o.RecoveryPoint, tt.point)
			}
			if tt.status == idempotency.StatusCompleted {
				if r := s.order(t, "acme", key, body, nil); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("retry = %d %s, want the stored 201 replayed", r.status, r.body)
				}
				return
			}
			wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "30")
		})
	}

	// After the lease, each retry takes the request over where it stopped.
	s.clock.Advance(s.cfg.Lease + time.Second)
	for _, tt := range tests {
		key := "order-crash-" + tt.fault
		s.calls.take()
		r := s.order(t, "acme", key, body, nil)
		if r.status != http.StatusCreated {
			t.Fatalf("%s: retry after the lease = %d %s, want 201", tt.fault, r.status, r.body)
		}
		ops, n := s.calls.take()
		t.Logf("%s: %d DynamoDB calls to resume: %v", tt.fault, n, ops)
		if n != tt.resumeOps {
			t.Errorf("%s: resuming made %d DynamoDB calls %v, want %d", tt.fault, n, ops, tt.resumeOps)
		}
		o := s.effects(t, key, body, orders.StatusPaid, 1, 1)
		if o.RecoveryPoint != orders.PointFinished || o.Receipt != orders.ReceiptQueued {
			t.Errorf("%s: order at %q receipt %q, want finished, queued", tt.fault, o.RecoveryPoint, o.Receipt)
		}
	}
}

// TestOrdersConcurrentDuplicates races requests of one key, and of the same
// raw key under two tenants: one order and one charge per tenant, every 201
// of a key the same bytes, the rest 409.
func TestOrdersConcurrentDuplicates(t *testing.T) {
	s := newOrderStack(t)
	const dups = 8
	body := orderBody("tok_visa", "ada@example.com")
	answers := map[string][]response{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, tenant := range []string{"acme", "globex"} {
		for range dups {
			wg.Go(func() {
				<-start
				r := s.order(t, tenant, "order-race", body, nil)
				mu.Lock()
				answers[tenant] = append(answers[tenant], r)
				mu.Unlock()
			})
		}
	}
	close(start)
	wg.Wait()
	for tenant, rs := range answers {
		var created []response
		for _, r := range rs {
			switch r.status {
			case http.StatusCreated:
				created = append(created, r)
			case http.StatusConflict:
			default:
				t.Errorf("%s: %d %s, want 201 or 409", tenant, r.status, r.body)
			}
		}
		final := s.order(t, tenant, "order-race", body, nil)
		for deadline := time.Now().Add(10 * time.Second); final.status == http.StatusConflict; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %d %s after 10s, want the order's answer", tenant, final.status, final.body)
			}
			time.Sleep(50 * time.Millisecond)
			final = s.order(t, tenant, "order-race", body, nil)
		}
		for _, r := range created {
			if string(r.body) != string(final.body) {
				t.Errorf("%s answered %s and %s", tenant, r.body, final.body)
			}
		}
		if got, want := decode(t, final)["id"], orderID(t, tenant, "order-race", body); got != want {
			t.Errorf("%s order = %v, want %s", tenant, got, want)
		}
	}
	if n := len(scan[orders.Order](t, s, s.names.ByLogicalID["OrdersTable"])); n != 2 {
		t.Errorf("orders = %d, want 2 (one per tenant)", n)
	}
	if n := len(scan[outbox.Job](t, s, s.names.ByLogicalID["OutboxTable"])); n != 2 {
		t.Errorf("receipt jobs = %d, want 2", n)
	}
	for _, tenant := range []string{"acme", "globex"} {
		fp, err := idempotency.RequestFingerprint(http.MethodPost, orders.RouteCreate, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.sim.Count(t.Context(), idempotency.NewKey(tenant, "order-race").Forward(fp+"\x00"+orders.PointChargeCreated))
		if err != nil || n != 1 {
			t.Errorf("%s charges = %d, %v; want 1", tenant, n, err)
		}
	}
}

// TestOrdersResolver: an order abandoned at each point, gone UNKNOWN, is
// finished by the reconciler through the orders Resolver (the phases the
// handler runs): the answer a retry then replays is the order's 201, with
// one order, one charge and one receipt job. Resolving the same stale
// stream image twice (a redelivery) changes nothing.
func TestOrdersResolver(t *testing.T) {
	s := newOrderStack(t)
	r := s.ordersReconciler(t)
	store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
	body := orderBody("tok_visa", "ada@example.com")
	for _, fault := range []string{"after-order-created", "after-provider-call", "after-charge-created"} {
		t.Run(fault, func(t *testing.T) {
			key := "order-resolve-" + fault
			wantCrash(t, s.order(t, "acme", key, body, map[string][]string{"Once-Fault": {fault}}), fault)
			// What the sweeper does once TTL has deleted the abandoned
			// reservation: the record is back, UNKNOWN, under a new lease.
			unknown := s.handOver(t, store, key, time.Hour)
			for range 2 { // the second is a redelivery of the same image
				if err := r.Reconcile(t.Context(), nil, unknown); err != nil {
					t.Fatalf("Reconcile = %v", err)
				}
			}
			done, err := s.record(t, key)
			if err != nil || done.Status != idempotency.StatusCompleted || done.Response == nil || done.Response.Status != http.StatusCreated {
				t.Fatalf("record = %s %+v, %v; want COMPLETED with the 201", done.Status, done.Response, err)
			}
			if done.Point != orders.PointFinished || done.Data["charge"] == "" {
				t.Errorf("reconciled record at %q with data %v, want the final point and the charge, as the live path records", done.Point, done.Data)
			}
			replay := s.order(t, "acme", key, body, nil)
			if replay.status != http.StatusCreated || string(replay.body) != string(done.Response.Body) || replay.header.Get("Location") == "" {
				t.Errorf("retry = %d %s, want the reconciled 201 %s with its Location", replay.status, replay.body, done.Response.Body)
			}
			o := s.effects(t, key, body, orders.StatusPaid, 1, 1)
			if o.RecoveryPoint != orders.PointFinished || o.Receipt != orders.ReceiptQueued {
				t.Errorf("order at %q, receipt %q; want finished, queued", o.RecoveryPoint, o.Receipt)
			}
		})
	}
}

// TestOrdersKeyRetention: an order resumed at order_created once the
// provider may have forgotten its forwarded key (ONCE_PROVIDER_KEY_RETENTION,
// 24h by default, less orders.KeyRetentionMargin, an hour, from the record's
// creation) is not charged again, neither by a client's retry taking the
// reservation over nor by the reconciler's Resolver: no call reaches the
// provider, the retry is answered 500 order_needs_review and the record
// stays for an operator (IN_PROGRESS under the retry's running lease, then
// UNKNOWN, which the reconciler leaves as it is, counting
// reconcile_unroutable). One younger than that resumes and charges once, as
// before.
func TestOrdersKeyRetention(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}), calls.option())
	r := s.ordersReconciler(t)
	store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
	body := orderBody("tok_visa", "ada@example.com")
	// Each case's order is abandoned at order_created, by a crash before
	// its call, at the clock's time then; the clock only moves forward, so
	// the cases run in order of their age.
	tests := []struct {
		name     string
		age      time.Duration // from the crash to the resume
		resolver bool          // resumed by the reconciler, else by a retry
		refused  bool
	}{
		{"retry, younger", 22*time.Hour + 59*time.Minute, false, false},
		{"resolver, younger", 22*time.Hour + 59*time.Minute, true, false},
		{"retry, older", 23*time.Hour + time.Second, false, true},
		{"resolver, older", 23*time.Hour + time.Second, true, true},
		{"retry, days later", 72 * time.Hour, false, true},
	}
	start := s.clock.Now()
	for _, tt := range tests {
		key := "order-retention-" + strings.ReplaceAll(strings.ReplaceAll(tt.name, ",", ""), " ", "-")
		wantCrash(t, s.order(t, "acme", key, body, map[string][]string{"Once-Fault": {"after-order-created"}}), "after-order-created")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "order-retention-" + strings.ReplaceAll(strings.ReplaceAll(tt.name, ",", ""), " ", "-")
			fk := orderForwardKey(t, key, body)
			s.clock.Advance(start.Add(tt.age).Sub(s.clock.Now()))
			if !tt.resolver {
				resp := s.order(t, "acme", key, body, nil)
				rec, err := s.record(t, key)
				if err != nil {
					t.Fatal(err)
				}
				if !tt.refused {
					if resp.status != http.StatusCreated || calls.of(fk) != 1 {
						t.Errorf("retry %s after the crash = %d %s with %d provider call(s), want 201 and 1", tt.age, resp.status, resp.body, calls.of(fk))
					}
					s.effects(t, key, body, orders.StatusPaid, 1, 1)
					return
				}
				wantProblem(t, resp, http.StatusInternalServerError, "order_needs_review", "")
				if n := calls.of(fk); n != 0 {
					t.Errorf("provider calls = %d, want 0: the provider may have forgotten the key", n)
				}
				if rec.Status != idempotency.StatusInProgress || rec.Point != orders.PointOrderCreated || !rec.ExpiresAt.After(s.clock.Now()) {
					t.Errorf("record = %s at %q until %v, want IN_PROGRESS at order_created under the retry's running lease", rec.Status, rec.Point, rec.ExpiresAt)
				}
				wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "30")
				s.effects(t, key, body, orders.StatusCreated, 0, 0)
				return
			}
			// The recovery check's hand-over: UNKNOWN under a new lease.
			unknown := s.handOver(t, store, key, s.cfg.Retention)
			before := strings.Count(s.metrics.String(), `"reconcile_unroutable":1`)
			if err := r.Reconcile(t.Context(), nil, unknown); err != nil {
				t.Fatalf("Reconcile = %v", err)
			}
			after, err := s.record(t, key)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.refused {
				if after.Status != idempotency.StatusCompleted || calls.of(fk) != 1 {
					t.Errorf("reconciled record = %s with %d provider call(s), want COMPLETED and 1", after.Status, calls.of(fk))
				}
				s.effects(t, key, body, orders.StatusPaid, 1, 1)
				return
			}
			if n := calls.of(fk); n != 0 {
				t.Errorf("provider calls = %d, want 0: the provider may have forgotten the key", n)
			}
			if after.Status != idempotency.StatusUnknown || after.Point != orders.PointOrderCreated || after.LeaseToken != unknown.LeaseToken {
				t.Errorf("record = %s at %q, want it left UNKNOWN at order_created for an operator", after.Status, after.Point)
			}
			if got := strings.Count(s.metrics.String(), `"reconcile_unroutable":1`); got != before+1 {
				t.Errorf("reconcile_unroutable counted %d times, want once: metrics %s", got-before, s.metrics)
			}
			wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "2")
			s.effects(t, key, body, orders.StatusCreated, 0, 0)
		})
	}
}

// forgetfulProvider wraps the simulator (which remembers a key for ever) in
// a provider that forgets a forwarded key KeyRetention after it first saw
// it, as Stripe does after 24 hours: a call under a forgotten key reaches
// the simulator under a new key (a new generation), so it charges again. It
// counts the calls by the key sent.
type forgetfulProvider struct {
	retention time.Duration
	now       func() time.Time // set once the stack exists

	mu    sync.Mutex
	calls map[string]int
	gen   map[string]int       // how often each key was forgotten
	since map[string]time.Time // when its current generation was first seen
}

func (p *forgetfulProvider) option() stackOption {
	p.calls, p.gen, p.since = map[string]int{}, map[string]int{}, map[string]time.Time{}
	return func(setup *stackSetup) {
		setup.simWrap = func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if key := r.Header.Get("Idempotency-Key"); r.Method == http.MethodPost && r.URL.Path == "/v1/charges" && key != "" {
					p.mu.Lock()
					p.calls[key]++
					now := p.now()
					if since, ok := p.since[key]; !ok || now.Sub(since) >= p.retention {
						if ok {
							p.gen[key]++
						}
						p.since[key] = now
					}
					if g := p.gen[key]; g > 0 {
						r.Header.Set("Idempotency-Key", fmt.Sprintf("%s-forgotten-%d", key, g))
					}
					p.mu.Unlock()
				}
				next.ServeHTTP(w, r)
			})
		}
	}
}

func (p *forgetfulProvider) of(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key]
}

// charges is the number of charges the simulator holds for key, its
// forgotten generations included.
func (p *forgetfulProvider) charges(t testing.TB, s *stack, key string) int {
	t.Helper()
	p.mu.Lock()
	gens := p.gen[key]
	p.mu.Unlock()
	total := 0
	for g := 0; g <= gens; g++ {
		k := key
		if g > 0 {
			k = fmt.Sprintf("%s-forgotten-%d", key, g)
		}
		n, err := s.sim.Count(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}

// deleteRecord deletes acme's record of key, as if it had expired and been
// removed, or an operator had deleted it.
func (s *stack) deleteRecord(t testing.TB, key string) {
	t.Helper()
	if _, err := s.client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(s.names.ByLogicalID["IdempotencyTable"]),
		Key:       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: idempotency.NewKey("acme", key).ID()}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.record(t, key); err == nil {
		t.Fatalf("record of %s still there after its deletion", key)
	}
}

// TestOrdersResentAfterExpiry: a request re-sent with the same key and body
// once its record is gone (expired after ONCE_RETENTION, or deleted) names
// the same order (its ID is derived from the key and the body), which may
// already hold a charge: the re-send lands on that order and that charge,
// calls the provider for nothing and answers what the first request
// answered (201 with the same body, or 402), which is then replayed. An
// order that holds no charge, older than the provider's key memory, is
// refused by the key-retention guard (its age counted from the stored
// order's creation, the first request's) rather than charged again; a young
// one is charged under its forwarded key, which the provider still knows.
// The provider here forgets keys after 24 hours, as Stripe does.
func TestOrdersResentAfterExpiry(t *testing.T) {
	p := &forgetfulProvider{retention: 24 * time.Hour}
	s := newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}), p.option())
	p.now = s.clock.Now
	paid, declined := orderBody("tok_visa", "ada@example.com"), orderBody("tok_chargeDeclined", "ada@example.com")
	start := s.clock.Now()

	first := map[string]response{}
	for _, c := range []struct{ key, body string }{{"resend-paid", paid}, {"resend-declined", declined}, {"resend-paid-young", paid}, {"resend-paid-resolved", paid}} {
		first[c.key] = s.order(t, "acme", c.key, c.body, nil)
	}
	if first["resend-paid"].status != http.StatusCreated || first["resend-declined"].status != http.StatusPaymentRequired {
		t.Fatalf("first answers = %d, %d; want 201, 402", first["resend-paid"].status, first["resend-declined"].status)
	}
	for _, key := range []string{"resend-unrecorded", "resend-unrecorded-young"} {
		wantCrash(t, s.order(t, "acme", key, paid, map[string][]string{"Once-Fault": {"after-provider-call"}}), "after-provider-call")
	}

	// resend sends body under key again and checks its answer: the first
	// one's (status and body) when want is set, with calls provider calls in
	// all for the key, charges charges at the provider.
	resend := func(t *testing.T, key, body string, want response, calls, charges int) response {
		t.Helper()
		fk := orderForwardKey(t, key, body)
		r := s.order(t, "acme", key, body, nil)
		if r.status != want.status || string(r.body) != string(want.body) {
			t.Errorf("re-send = %d %s, want %d %s", r.status, r.body, want.status, want.body)
		}
		if got := p.of(fk); got != calls {
			t.Errorf("provider calls = %d, want %d", got, calls)
		}
		if got := p.charges(t, s, fk); got != charges {
			t.Errorf("provider charges = %d, want %d", got, charges)
		}
		return r
	}

	t.Run("young, paid", func(t *testing.T) {
		s.clock.Advance(30 * time.Minute)
		s.deleteRecord(t, "resend-paid-young")
		r := resend(t, "resend-paid-young", paid, first["resend-paid-young"], 1, 1)
		wantReplay(t, s.order(t, "acme", "resend-paid-young", paid, nil), r)
		s.effects(t, "resend-paid-young", paid, orders.StatusPaid, 1, 1)
	})
	t.Run("young, charged but unrecorded", func(t *testing.T) {
		// Its record gone, the order holds no charge: the provider still
		// knows the key and answers the first call's charge.
		s.deleteRecord(t, "resend-unrecorded-young")
		fk := orderForwardKey(t, "resend-unrecorded-young", paid)
		c, err := s.provider.Lookup(t.Context(), fk)
		if err != nil {
			t.Fatal(err)
		}
		want := response{status: http.StatusCreated}
		body := decode(t, first["resend-paid-young"])
		body["id"], body["charge"] = orderID(t, "acme", "resend-unrecorded-young", paid), c.ID
		want.body = marshal(t, body)
		got := s.order(t, "acme", "resend-unrecorded-young", paid, nil)
		if got.status != http.StatusCreated || !cmp.Equal(decode(t, got), decode(t, want)) {
			t.Errorf("re-send = %d %s, want 201 %s (the order's creation, the first call's charge)", got.status, got.body, want.body)
		}
		if n := p.of(fk); n != 2 {
			t.Errorf("provider calls = %d, want 2 (the first, and the re-send's under the same key)", n)
		}
		s.effects(t, "resend-unrecorded-young", paid, orders.StatusPaid, 1, 1)
	})

	s.clock.Advance(start.Add(49 * time.Hour).Sub(s.clock.Now()))
	t.Run("paid, expired and forgotten", func(t *testing.T) {
		// Its receipt was sent, and its job expired since (a week after):
		// none is queued again.
		id := orderID(t, "acme", "resend-paid", paid)
		if _, err := s.client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.names.ByLogicalID["OrdersTable"]),
			Key:                       map[string]types.AttributeValue{orders.KeyAttr: &types.AttributeValueMemberS{Value: orders.PK("acme", id)}},
			UpdateExpression:          aws.String("SET #receipt = :sent"),
			ExpressionAttributeNames:  map[string]string{"#receipt": outbox.OrderReceipt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":sent": &types.AttributeValueMemberS{Value: outbox.ReceiptSent}},
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
			TableName: aws.String(s.names.ByLogicalID["OutboxTable"]),
			Key:       map[string]types.AttributeValue{outbox.KeyAttr: &types.AttributeValueMemberS{Value: outbox.JobPK("acme", orders.JobID(id))}},
		}); err != nil {
			t.Fatal(err)
		}
		r := resend(t, "resend-paid", paid, first["resend-paid"], 1, 1)
		if r.header.Get("Location") != first["resend-paid"].header.Get("Location") {
			t.Errorf("Location = %q, want %q", r.header.Get("Location"), first["resend-paid"].header.Get("Location"))
		}
		wantReplay(t, s.order(t, "acme", "resend-paid", paid, nil), r)
		if o := s.effects(t, "resend-paid", paid, orders.StatusPaid, 1, 0); o.Receipt != orders.ReceiptSent || o.RecoveryPoint != orders.PointFinished {
			t.Errorf("order receipt %q at %q, want sent, finished", o.Receipt, o.RecoveryPoint)
		}
		rec, err := s.record(t, "resend-paid")
		if err != nil || rec.Status != idempotency.StatusCompleted {
			t.Errorf("record = %s, %v; want COMPLETED", rec.Status, err)
		}
	})
	t.Run("paid, expired and forgotten, resolved", func(t *testing.T) {
		// The re-send crashes before its charge phase; the reconciler's
		// Resolver resumes it: the same order, the same charge, the first
		// answer.
		const key = "resend-paid-resolved"
		wantCrash(t, s.order(t, "acme", key, paid, map[string][]string{"Once-Fault": {"after-order-created"}}), "after-order-created")
		store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
		r := s.ordersReconciler(t)
		unknown := s.handOver(t, store, key, s.cfg.Retention)
		if err := r.Reconcile(t.Context(), nil, unknown); err != nil {
			t.Fatalf("Reconcile = %v", err)
		}
		done, err := s.record(t, key)
		if err != nil || done.Status != idempotency.StatusCompleted || done.Response == nil || string(done.Response.Body) != string(first[key].body) {
			t.Fatalf("record = %s %+v, %v; want COMPLETED with the first answer %s", done.Status, done.Response, err, first[key].body)
		}
		fk := orderForwardKey(t, key, paid)
		if n, c := p.of(fk), p.charges(t, s, fk); n != 1 || c != 1 {
			t.Errorf("provider calls = %d, charges = %d; want 1, 1", n, c)
		}
		s.effects(t, key, paid, orders.StatusPaid, 1, 1)
	})
	t.Run("declined, expired and forgotten", func(t *testing.T) {
		r := resend(t, "resend-declined", declined, first["resend-declined"], 1, 1)
		wantReplay(t, s.order(t, "acme", "resend-declined", declined, nil), r)
		s.effects(t, "resend-declined", declined, orders.StatusFailed, 1, 0)
	})
	t.Run("charged but unrecorded, record gone, forgotten", func(t *testing.T) {
		// The first call charged and crashed before recording it; the
		// record is gone. The re-send's record is new, but the order is
		// the first request's: 49 hours old, too old to call again.
		s.deleteRecord(t, "resend-unrecorded")
		fk := orderForwardKey(t, "resend-unrecorded", paid)
		wantProblem(t, s.order(t, "acme", "resend-unrecorded", paid, nil), http.StatusInternalServerError, "order_needs_review", "")
		if n := p.of(fk); n != 1 {
			t.Errorf("provider calls = %d, want 1 (the first only)", n)
		}
		if n := p.charges(t, s, fk); n != 1 {
			t.Errorf("provider charges = %d, want 1", n)
		}
		s.effects(t, "resend-unrecorded", paid, orders.StatusCreated, 1, 0)
	})
}

// failGet is an HTTP client for the DynamoDB SDK that fails every GetItem
// while on is set, as a DynamoDB outage would.
type failGet struct {
	on   *atomic.Bool
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
}

func (d failGet) Do(r *http.Request) (*http.Response, error) {
	if d.on.Load() && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetItem") {
		return nil, errors.New("injected: connection reset")
	}
	return d.next.Do(r)
}

// TestOrdersReadFailure: the order cannot be read before its charge (the
// store unavailable): 503 store_unavailable, no provider call, the lease
// given up at order_created, so that a retry once the store answers
// resumes there at once and charges once.
func TestOrdersReadFailure(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	var on atomic.Bool
	s := newStack(t, withConfig(func(c *config.Config) { c.ProviderTimeout = chargeTimeout }), calls.option(), func(setup *stackSetup) {
		setup.client = func(t testing.TB, base *dynamodb.Client) *dynamodb.Client {
			return dynamodb.New(base.Options(), func(o *dynamodb.Options) {
				o.HTTPClient = failGet{on: &on, next: o.HTTPClient}
				o.RetryMaxAttempts = 2
			})
		}
	})
	const key = "order-read-failure"
	body := orderBody("tok_visa", "ada@example.com")
	fk := orderForwardKey(t, key, body)
	on.Store(true)
	wantProblem(t, s.order(t, "acme", key, body, nil), http.StatusServiceUnavailable, "store_unavailable", "1")
	if n := calls.of(fk); n != 0 {
		t.Errorf("provider calls = %d, want 0", n)
	}
	rec, err := s.record(t, key)
	if err != nil || rec.Status != idempotency.StatusInProgress || rec.Point != orders.PointOrderCreated || rec.ExpiresAt.After(s.clock.Now()) {
		t.Errorf("record = %s at %q until %v, %v; want IN_PROGRESS at order_created, its lease given up", rec.Status, rec.Point, rec.ExpiresAt, err)
	}
	on.Store(false)
	if r := s.order(t, "acme", key, body, nil); r.status != http.StatusCreated || calls.of(fk) != 1 {
		t.Errorf("retry = %d %s with %d provider call(s), want 201 and 1", r.status, r.body, calls.of(fk))
	}
	s.effects(t, key, body, orders.StatusPaid, 1, 1)
}

// ordersReconciler is the reconciler function's Reconciler on s, with the
// API's resolvers (reconciler.Resolvers), s's clock and a Settle of
// chargeTimeout, counting into s.metrics.
func (s *stack) ordersReconciler(t *testing.T) *recovery.Reconciler {
	t.Helper()
	resolvers, err := reconciler.Resolvers(s.cfg, s.client, app.Options{Now: s.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store: dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]), Resolvers: resolvers, Settle: chargeTimeout,
		Metrics: metrics.New(s.metrics, "once", map[string]string{"Service": "reconciler"}), Now: s.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// handOver moves key's abandoned reservation to UNKNOWN under a new lease,
// expiring expiry from s's clock, as the recovery check (or the sweeper's
// restore) does, and returns the record as the reconciler's stream image
// would carry it.
func (s *stack) handOver(t *testing.T, store *dynamo.Store, key string, expiry time.Duration) idempotency.Record {
	t.Helper()
	rec, err := s.record(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MarkUnknown(t.Context(), rec.Key, rec.LeaseToken, idempotency.NewToken(), s.clock.Now().Add(expiry), s.clock.Now()); err != nil {
		t.Fatal(err)
	}
	unknown, err := s.record(t, key)
	if err != nil {
		t.Fatal(err)
	}
	return unknown
}
