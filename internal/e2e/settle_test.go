package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
)

// oncectl runs oncectl's command args against s's tables, as configured by
// cfg (s.cfg, or a variation of it), at s's clock.
func (s *stack) oncectl(t testing.TB, cfg config.Config, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, eo bytes.Buffer
	code = operator.New(cfg, s.client, nil, &o, &eo).WithClock(s.clock.Now).Run(t.Context(), args)
	return code, o.String(), eo.String()
}

// needsReview leaves each of acme's keys an order of body needing review:
// its request crashed before its charge, and is handed to the reconciler
// as UNKNOWN once it is older than the provider remembers keys (the
// default ONCE_PROVIDER_KEY_RETENTION less its margin), which leaves it
// UNKNOWN at order_created without a call (reconcile_unroutable). It
// returns the records as the reconciler left them.
func (s *stack) needsReview(t *testing.T, r *recovery.Reconciler, body string, keys ...string) map[string]idempotency.Record {
	t.Helper()
	for _, key := range keys {
		wantCrash(t, s.order(t, "acme", key, body, map[string][]string{"Once-Fault": {"after-order-created"}}), "after-order-created")
	}
	s.clock.Advance(23*time.Hour + time.Second)
	store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
	recs := map[string]idempotency.Record{}
	for _, key := range keys {
		unknown := s.handOver(t, store, key, s.cfg.Retention)
		if err := r.Reconcile(t.Context(), nil, unknown); err != nil {
			t.Fatalf("Reconcile = %v", err)
		}
		rec, err := s.record(t, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != idempotency.StatusUnknown || rec.Point != orders.PointOrderCreated || rec.LeaseToken != unknown.LeaseToken {
			t.Fatalf("record %s = %s at %q, want left UNKNOWN at order_created for an operator", key, rec.Status, rec.Point)
		}
		recs[key] = rec
	}
	return recs
}

// items returns the items of acme's key's record and of its order of
// body, decoded, as they stand.
func (s *stack) items(t testing.TB, key, body string) map[string]any {
	t.Helper()
	get := func(table, pk string) any {
		out, err := s.client.GetItem(t.Context(), &dynamodb.GetItemInput{
			TableName: aws.String(s.names.ByLogicalID[table]), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := attributevalue.UnmarshalMap(out.Item, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	return map[string]any{
		"record": get("IdempotencyTable", idempotency.NewKey("acme", key).ID()),
		"order":  get("OrdersTable", orders.PK("acme", orderID(t, "acme", key, body))),
	}
}

// settleResult is the part of settle-order's -json output the tests read.
type settleResult struct {
	LeaseToken    string `json:"lease_token"`
	Order         string `json:"order"`
	Plan          string `json:"plan"`
	DryRun        bool   `json:"dry_run"`
	Settled       bool   `json:"settled"`
	ProviderCalls int    `json:"provider_calls"`
	StatusAfter   string `json:"status_after"`
	AnswerStatus  int    `json:"answer_status"`
}

func decodeSettle(t testing.TB, out string) settleResult {
	t.Helper()
	var r settleResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("settle-order -json printed %q: %v", out, err)
	}
	return r
}

// TestSettleOrder: an order left UNKNOWN by the key-retention guard is
// settled by oncectl settle-order with what the operator found at the
// provider: a dry run first, which writes nothing, then -confirm with the
// lease token shown. charged and declined answer the operator's charge
// without calling the provider; not-charged charges once, under the
// order's forwarded key. The record ends COMPLETED with the answer the
// request would have stored, the order paid (receipt queued) or failed,
// and a client's retry of the key, through the api, replays that answer
// byte for byte.
func TestSettleOrder(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}), calls.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	tests := []struct {
		name       string
		args       []string
		answer     int
		status     orders.Status
		charge     string // "": the provider's
		failure    string
		calls, job int
	}{
		{"charged", []string{"-charged", "ch_found_by_hand"}, http.StatusCreated, orders.StatusPaid, "ch_found_by_hand", "", 0, 1},
		{"declined", []string{"-declined", "ch_declined_by_hand", "-failure-code", "card_declined"}, http.StatusPaymentRequired, orders.StatusFailed, "ch_declined_by_hand", "card_declined", 0, 0},
		{"not-charged", []string{"-not-charged"}, http.StatusCreated, orders.StatusPaid, "", "", 1, 1},
	}
	var keys []string
	for _, tt := range tests {
		keys = append(keys, "order-settle-"+tt.name)
	}
	recs := s.needsReview(t, r, body, keys...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "order-settle-" + tt.name
			fk := orderForwardKey(t, key, body)
			rec := recs[key]
			args := append([]string{"settle-order", "-json", "-tenant", "acme", "-key", key}, tt.args...)

			before := s.items(t, key, body)
			code, out, errOut := s.oncectl(t, s.cfg, args...)
			dry := decodeSettle(t, out)
			if code != 1 || !dry.DryRun || dry.Settled || dry.LeaseToken != rec.LeaseToken || dry.Plan == "" || !strings.Contains(errOut, "-confirm "+rec.LeaseToken) {
				t.Errorf("dry run = %d %q %q, want 1, the plan, and how to confirm", code, out, errOut)
			}
			if diff := cmp.Diff(before, s.items(t, key, body)); diff != "" {
				t.Errorf("the dry run wrote (-before +after):\n%s", diff)
			}

			code, out, errOut = s.oncectl(t, s.cfg, append(args, "-confirm", rec.LeaseToken)...)
			got := decodeSettle(t, out)
			if code != 0 || !got.Settled || got.StatusAfter != string(idempotency.StatusCompleted) || got.AnswerStatus != tt.answer || got.ProviderCalls != tt.calls {
				t.Fatalf("settle-order -confirm = %d %q %q, want 0, settled, COMPLETED with %d after %d provider call(s)", code, out, errOut, tt.answer, tt.calls)
			}
			for _, secret := range []string{key, "ada@example.com", "tok_visa"} {
				if strings.Contains(errOut, secret) || strings.Contains(out, secret) {
					t.Errorf("settle-order printed %q (a raw key or the body): %q %q", secret, out, errOut)
				}
			}
			if n := calls.of(fk); n != tt.calls {
				t.Errorf("provider calls under the order's key = %d, want %d", n, tt.calls)
			}
			done, err := s.record(t, key)
			if err != nil || done.Status != idempotency.StatusCompleted || done.Response == nil || done.Response.Status != tt.answer || done.Point != orders.PointFinished {
				t.Fatalf("record = %s at %q %+v, %v; want COMPLETED at finished with %d", done.Status, done.Point, done.Response, err, tt.answer)
			}
			o := s.effects(t, key, body, tt.status, tt.calls, tt.job)
			wantCharge := tt.charge
			if wantCharge == "" {
				wantCharge = done.Data["charge"]
			}
			if o.Charge == "" || o.Charge != wantCharge || done.Data["charge"] != wantCharge || o.FailureCode != tt.failure || o.RecoveryPoint != orders.PointFinished {
				t.Errorf("order charge %q failure %q at %q, record's charge %q; want %q %q at finished", o.Charge, o.FailureCode, o.RecoveryPoint, done.Data["charge"], wantCharge, tt.failure)
			}
			if tt.status == orders.StatusPaid {
				if o.Receipt != orders.ReceiptQueued || !strings.Contains(string(done.Response.Body), `"charge":"`+wantCharge+`"`) {
					t.Errorf("order receipt %q, answer %s; want queued, with charge %s", o.Receipt, done.Response.Body, wantCharge)
				}
			} else if !strings.Contains(string(done.Response.Body), "card_declined") {
				t.Errorf("answer %s, want the decline's problem", done.Response.Body)
			}

			replay := s.order(t, "acme", key, body, nil)
			if replay.status != tt.answer || !bytes.Equal(replay.body, done.Response.Body) {
				t.Errorf("retry = %d %s, want the settled %d %s", replay.status, replay.body, tt.answer, done.Response.Body)
			}
			if n := calls.of(fk); n != tt.calls {
				t.Errorf("provider calls after the retry = %d, want %d", n, tt.calls)
			}
			// Settled twice: refused, nothing written.
			after := s.items(t, key, body)
			if code, out, errOut := s.oncectl(t, s.cfg, append(args, "-confirm", rec.LeaseToken)...); code != 1 || !strings.Contains(errOut, "COMPLETED") {
				t.Errorf("settle-order again = %d %q %q, want 1, refused: COMPLETED", code, out, errOut)
			}
			if diff := cmp.Diff(after, s.items(t, key, body)); diff != "" {
				t.Errorf("settling again wrote (-before +after):\n%s", diff)
			}
		})
	}
}

// TestSettleOrderRefusals: settle-order refuses, writing nothing (the
// record and the order as they were), a record that is not UNKNOWN (live
// IN_PROGRESS, or COMPLETED), one of another route, an unknown key, flags
// that conflict or are missing (a usage error, 2), a -confirm with another
// lease token than the record's, one past order_created (the provider's
// answer recorded, for the reconciler to finish), an order that holds
// another answer than
// the one given, and -not-charged without the provider's settings. An
// order that already holds the very charge given is settled with it,
// without the provider.
func TestSettleOrderRefusals(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := newStack(t, withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	}), calls.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	recs := s.needsReview(t, r, body, "order-refuse", "order-holds")
	rec := recs["order-refuse"]
	// A live request: crashed now, its lease still running.
	wantCrash(t, s.order(t, "acme", "order-live", body, map[string][]string{"Once-Fault": {"after-order-created"}}), "after-order-created")
	// One whose charge is recorded (charge_created), handed to the
	// reconciler.
	wantCrash(t, s.order(t, "acme", "order-charged", body, map[string][]string{"Once-Fault": {"after-charge-created"}}), "after-charge-created")
	charged := s.handOver(t, dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]), "order-charged", s.cfg.Retention)
	// A finished one.
	if resp := s.order(t, "acme", "order-done", body, nil); resp.status != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", resp.status, resp.body)
	}
	// An UNKNOWN record of another route.
	now := s.clock.Now()
	other := idempotency.Record{
		Key: idempotency.NewKey("acme", "charge-1"), Status: idempotency.StatusUnknown, Route: "POST /v1/charges",
		Fingerprint: "f", External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now,
	}
	if err := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]).Reserve(t.Context(), other, nil, now); err != nil {
		t.Fatal(err)
	}
	noProvider := s.cfg
	noProvider.ProviderURL = ""

	tests := []struct {
		name string
		key  string
		cfg  config.Config
		args []string
		code int
		says string
	}{
		{"no outcome", "order-refuse", s.cfg, nil, 2, "give one of"},
		{"two outcomes", "order-refuse", s.cfg, []string{"-charged", "ch_1", "-not-charged"}, 2, "give one of"},
		{"charged and declined", "order-refuse", s.cfg, []string{"-charged", "ch_1", "-declined", "ch_2", "-failure-code", "card_declined"}, 2, "give one of"},
		{"declined without failure code", "order-refuse", s.cfg, []string{"-declined", "ch_1"}, 2, "-failure-code"},
		{"failure code without declined", "order-refuse", s.cfg, []string{"-charged", "ch_1", "-failure-code", "card_declined"}, 2, "-failure-code goes with -declined"},
		{"bad charge ID", "order-refuse", s.cfg, []string{"-charged", "ch 1"}, 2, "not a provider's charge ID"},
		{"bad failure code", "order-refuse", s.cfg, []string{"-declined", "ch_1", "-failure-code", "Card Declined"}, 2, "not a failure code"},
		{"wrong lease token", "order-refuse", s.cfg, []string{"-charged", "ch_1", "-confirm", idempotency.NewToken()}, 1, "changed since it was shown"},
		{"no provider settings", "order-refuse", noProvider, []string{"-not-charged", "-confirm", rec.LeaseToken}, 1, config.EnvProviderURL + " is not set"},
		{"unknown key", "order-nobody", s.cfg, []string{"-charged", "ch_1", "-confirm", rec.LeaseToken}, 1, "no record"},
		{"live request", "order-live", s.cfg, []string{"-charged", "ch_1", "-confirm", rec.LeaseToken}, 1, "IN_PROGRESS and its lease runs until"},
		{"past order_created", "order-charged", s.cfg, []string{"-charged", "ch_1", "-confirm", charged.LeaseToken}, 1, "past order_created: the provider's answer is recorded"},
		{"completed", "order-done", s.cfg, []string{"-charged", "ch_1", "-confirm", rec.LeaseToken}, 1, "COMPLETED"},
		{"another route", "charge-1", s.cfg, []string{"-charged", "ch_1", "-confirm", other.LeaseToken}, 1, "not of POST /v1/orders"},
		{"order holds another charge", "order-holds", s.cfg, []string{"-charged", "ch_other", "-confirm", recs["order-holds"].LeaseToken}, 1, "holds another answer"},
		{"order holds a charge, not-charged", "order-holds", s.cfg, []string{"-not-charged", "-confirm", recs["order-holds"].LeaseToken}, 1, "-not-charged says none exists"},
		{"order holds a charge, declined", "order-holds", s.cfg, []string{"-declined", "ch_held", "-failure-code", "card_declined", "-confirm", recs["order-holds"].LeaseToken}, 1, "holds another answer"},
	}
	// The order of order-holds holds a charge already, as when its request
	// was re-sent after its record expired and charged then.
	if _, err := s.client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.names.ByLogicalID["OrdersTable"]),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: orders.PK("acme", orderID(t, "acme", "order-holds", body))}},
		UpdateExpression:          aws.String("SET #status = :paid, #charge = :charge"),
		ExpressionAttributeNames:  map[string]string{"#status": "status", "#charge": "charge"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":paid": &types.AttributeValueMemberS{Value: "paid"}, ":charge": &types.AttributeValueMemberS{Value: "ch_held"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"settle-order", "-tenant", "acme", "-key", tt.key}, tt.args...)
			before := s.items(t, tt.key, body)
			code, out, errOut := s.oncectl(t, tt.cfg, args...)
			if code != tt.code || !strings.Contains(errOut, tt.says) {
				t.Errorf("settle-order %v = %d %q %q, want %d saying %q", tt.args, code, out, errOut, tt.code, tt.says)
			}
			if diff := cmp.Diff(before, s.items(t, tt.key, body)); diff != "" {
				t.Errorf("a refused settle-order wrote (-before +after):\n%s", diff)
			}
		})
	}
	if n := calls.of(orderForwardKey(t, "order-refuse", body)) + calls.of(orderForwardKey(t, "order-holds", body)); n != 0 {
		t.Errorf("provider calls = %d, want 0", n)
	}

	// The charge the order holds, given: settled with it, no call.
	key := "order-holds"
	code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-json", "-tenant", "acme", "-key", key, "-charged", "ch_held", "-confirm", recs[key].LeaseToken)
	if got := decodeSettle(t, out); code != 0 || !got.Settled || got.AnswerStatus != http.StatusCreated || got.ProviderCalls != 0 {
		t.Fatalf("settle-order -charged ch_held = %d %q %q, want settled, 201, no provider call", code, out, errOut)
	}
	o := s.effects(t, key, body, orders.StatusPaid, 0, 1)
	done, err := s.record(t, key)
	if err != nil || o.Charge != "ch_held" || done.Data["charge"] != "ch_held" || !strings.Contains(string(done.Response.Body), `"charge":"ch_held"`) {
		t.Errorf("order charge %q, record %v %s, %v; want ch_held throughout", o.Charge, done.Data, done.Response.Body, err)
	}
	if replay := s.order(t, "acme", key, body, nil); replay.status != http.StatusCreated || !bytes.Equal(replay.body, done.Response.Body) {
		t.Errorf("retry = %d %s, want the settled 201 %s", replay.status, replay.body, done.Response.Body)
	}
}

// TestSettleOrderRace: settle-orders of one record at once, or racing the
// reconciler, complete it exactly once. Eight -not-charged of an order
// needing review: one claims the record and charges it, once; the others
// stop, changed meanwhile, before any call. Four -charged against two of
// the reconciler's resolutions of the same image (which leave an order this
// old to an operator, calling nothing): one settle completes it. Each ends
// with one answer throughout: the record's, the order's, its one receipt
// job's and the provider's charge under the forwarded key.
func TestSettleOrderRace(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := settleStack(t, calls.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	const settlers = 8
	// won counts the exit codes 0.
	won := func(codes []int) int {
		n := 0
		for _, c := range codes {
			if c == 0 {
				n++
			}
		}
		return n
	}

	t.Run("settlers", func(t *testing.T) {
		key := "order-race"
		fk := orderForwardKey(t, key, body)
		rec := s.needsReview(t, r, body, key)[key]
		codes := make([]int, settlers)
		var wg sync.WaitGroup
		for i := range settlers {
			wg.Go(func() {
				codes[i], _, _ = s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", rec.LeaseToken)
			})
		}
		wg.Wait()
		if won(codes) != 1 {
			t.Errorf("settle-order exit codes %v, want exactly one 0", codes)
		}
		if n := calls.of(fk); n != 1 {
			t.Errorf("provider calls = %d, want 1", n)
		}
		done, err := s.record(t, key)
		if err != nil || done.Status != idempotency.StatusCompleted || done.Response.Status != http.StatusCreated {
			t.Fatalf("record = %s %+v, %v; want COMPLETED 201", done.Status, done.Response, err)
		}
		ch, err := s.provider.Lookup(t.Context(), fk)
		if err != nil {
			t.Fatalf("Lookup = %v", err)
		}
		o := s.effects(t, key, body, orders.StatusPaid, 1, 1)
		if o.Charge != ch.ID || done.Data["charge"] != ch.ID || !strings.Contains(string(done.Response.Body), `"charge":"`+ch.ID+`"`) {
			t.Errorf("order charge %q, record's %q, answer %s; want the provider's %q throughout", o.Charge, done.Data["charge"], done.Response.Body, ch.ID)
		}
		if replay := s.order(t, "acme", key, body, nil); replay.status != http.StatusCreated || !bytes.Equal(replay.body, done.Response.Body) {
			t.Errorf("retry = %d %s, want the settled 201 %s", replay.status, replay.body, done.Response.Body)
		}
	})

	t.Run("settlers and the reconciler", func(t *testing.T) {
		key := "order-race-reconciler"
		fk := orderForwardKey(t, key, body)
		rec := s.needsReview(t, r, body, key)[key]
		codes := make([]int, settlers/2)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				codes[i], _, _ = s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-charged", "ch_found_by_hand", "-confirm", rec.LeaseToken)
			})
		}
		for range 2 {
			wg.Go(func() {
				if err := r.Reconcile(t.Context(), nil, rec); err != nil {
					t.Errorf("Reconcile = %v", err)
				}
			})
		}
		wg.Wait()
		if won(codes) != 1 {
			t.Errorf("settle-order exit codes %v, want exactly one 0", codes)
		}
		done, err := s.record(t, key)
		if err != nil || done.Status != idempotency.StatusCompleted || done.Response.Status != http.StatusCreated {
			t.Fatalf("record = %s %+v, %v; want COMPLETED 201", done.Status, done.Response, err)
		}
		if n := calls.of(fk); n != 0 {
			t.Errorf("provider calls = %d, want 0", n)
		}
		o := s.effects(t, key, body, orders.StatusPaid, 0, 1)
		if o.Charge != "ch_found_by_hand" || done.Data["charge"] != o.Charge || !strings.Contains(string(done.Response.Body), `"charge":"`+o.Charge+`"`) {
			t.Errorf("order charge %q, record's %q, answer %s: want ch_found_by_hand throughout", o.Charge, done.Data["charge"], done.Response.Body)
		}
	})
}

// simHook lets a test step into the simulator's charges (POST /v1/charges):
// hook, when set, runs before the simulator, and answers instead of it when
// it returns true.
type simHook struct {
	mu   sync.Mutex
	hook func(w http.ResponseWriter, r *http.Request, next http.Handler) bool
}

func (h *simHook) option() stackOption {
	return func(setup *stackSetup) {
		setup.simWrap = func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.mu.Lock()
				f := h.hook
				h.mu.Unlock()
				if f != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/charges" && f(w, r, next) {
					return
				}
				next.ServeHTTP(w, r)
			})
		}
	}
}

func (h *simHook) set(f func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) {
	h.mu.Lock()
	h.hook = f
	h.mu.Unlock()
}

func settleStack(t *testing.T, opts ...stackOption) *stack {
	t.Helper()
	return newStack(t, append([]stackOption{withConfig(func(c *config.Config) {
		c.ProviderTimeout = chargeTimeout
		c.FaultInjection = true
	})}, opts...)...)
}

// TestSettleOrderYoung: an order whose forwarded key the provider still
// remembers is refused, whatever the outcome given, writing nothing: the
// reconciler settles it itself. Run while the reconciler's provider call
// is in flight (the race that completed the order with the operator's
// charge while the provider made another), the settle is refused and the
// reconciler completes the order with the provider's one charge. With
// ONCE_PROVIDER_KEY_RETENTION 0 (kept for ever), even an old order is
// refused.
func TestSettleOrderYoung(t *testing.T) {
	h := &simHook{}
	s := settleStack(t, h.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	key := "order-young"
	wantCrash(t, s.order(t, "acme", key, body, map[string][]string{"Once-Fault": {"after-order-created"}}), "after-order-created")
	unknown := s.handOver(t, dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"]), key, s.cfg.Retention)
	for _, args := range [][]string{
		{"-charged", "ch_operator"},
		{"-declined", "ch_operator", "-failure-code", "card_declined"},
		{"-not-charged"},
	} {
		before := s.items(t, key, body)
		code, out, errOut := s.oncectl(t, s.cfg, append([]string{"settle-order", "-tenant", "acme", "-key", key, "-confirm", unknown.LeaseToken}, args...)...)
		if code != 1 || !strings.Contains(errOut, "still remembers its forwarded key") || !strings.Contains(errOut, "oncectl reannounce") {
			t.Errorf("settle-order %v of a young order = %d %q %q, want 1, refused: the reconciler settles it", args, code, out, errOut)
		}
		if diff := cmp.Diff(before, s.items(t, key, body)); diff != "" {
			t.Errorf("a refused settle-order wrote (-before +after):\n%s", diff)
		}
	}

	var code int
	var errOut string
	var once sync.Once
	h.set(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
		once.Do(func() {
			code, _, errOut = s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-charged", "ch_operator", "-confirm", unknown.LeaseToken)
		})
		return false
	})
	if err := r.Reconcile(t.Context(), nil, unknown); err != nil {
		t.Fatalf("Reconcile = %v", err)
	}
	if code != 1 || !strings.Contains(errOut, "still remembers its forwarded key") {
		t.Errorf("settle-order during the reconciler's call = %d %q, want 1, refused", code, errOut)
	}
	done, err := s.record(t, key)
	if err != nil || done.Status != idempotency.StatusCompleted {
		t.Fatalf("record = %s, %v; want COMPLETED by the reconciler", done.Status, err)
	}
	ch, err := s.provider.Lookup(t.Context(), orderForwardKey(t, key, body))
	if err != nil {
		t.Fatalf("Lookup = %v", err)
	}
	o := s.effects(t, key, body, orders.StatusPaid, 1, 1)
	if o.Charge != ch.ID || done.Data["charge"] != ch.ID || !strings.Contains(string(done.Response.Body), `"charge":"`+ch.ID+`"`) {
		t.Errorf("order charge %q, record's %q, answer %s; want the provider's %q throughout", o.Charge, done.Data["charge"], done.Response.Body, ch.ID)
	}

	// Kept for ever: an old order is refused too.
	old := "order-young-forever"
	rec := s.needsReview(t, r, body, old)[old]
	forever := s.cfg
	forever.ProviderKeyRetention = 0
	before := s.items(t, old, body)
	if code, out, errOut := s.oncectl(t, forever, "settle-order", "-tenant", "acme", "-key", old, "-charged", "ch_1", "-confirm", rec.LeaseToken); code != 1 || !strings.Contains(errOut, "for ever") {
		t.Errorf("settle-order with %s 0 = %d %q %q, want 1, refused: kept for ever", config.EnvProviderKeyRetention, code, out, errOut)
	}
	if diff := cmp.Diff(before, s.items(t, old, body)); diff != "" {
		t.Errorf("a refused settle-order wrote (-before +after):\n%s", diff)
	}
}

// TestSettleOrderAtProvider: with ONCE_PROVIDER_URL set, settle-order
// looks the order's forwarded key up at the provider before it settles,
// in the dry run and after its claim: a charge that is not the one given,
// or any charge with -not-charged, is refused naming it, as is a lookup
// that fails; the very charge found is settled with, calling nothing.
// Without ONCE_PROVIDER_URL, -charged is settled on the operator's word,
// and says so.
func TestSettleOrderAtProvider(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := settleStack(t, calls.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	recs := s.needsReview(t, r, body, "order-at-provider", "order-declined-at-provider", "order-word")
	charge := func(key, source string) provider.Charge {
		c, err := s.provider.Charge(t.Context(), orderForwardKey(t, key, body), provider.ChargeRequest{Amount: 4200, Currency: "eur", Source: source, Customer: "cus_42"})
		var declined *provider.DeclinedError
		if errors.As(err, &declined) {
			return declined.Charge
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The first request's call landed, and no one recorded it.
	paid, failed := charge("order-at-provider", "tok_visa"), charge("order-declined-at-provider", "tok_chargeDeclined")
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	unreachable := s.cfg
	unreachable.ProviderURL = down.URL

	tests := []struct {
		name string
		key  string
		cfg  config.Config
		args []string
		says []string
	}{
		{"another charge", "order-at-provider", s.cfg, []string{"-charged", "ch_other"}, []string{"holds another answer", "charge " + paid.ID + " succeeded", "use -charged " + paid.ID}},
		{"declined, but it succeeded", "order-at-provider", s.cfg, []string{"-declined", paid.ID, "-failure-code", "card_declined"}, []string{"holds another answer", "use -charged " + paid.ID}},
		{"not charged, but it is", "order-at-provider", s.cfg, []string{"-not-charged"}, []string{"a charge exists", "use -charged " + paid.ID}},
		{"charged, but it was declined", "order-declined-at-provider", s.cfg, []string{"-charged", failed.ID}, []string{"holds another answer", "use -declined " + failed.ID + " -failure-code card_declined"}},
		{"another failure code", "order-declined-at-provider", s.cfg, []string{"-declined", failed.ID, "-failure-code", "expired_card"}, []string{"holds another answer"}},
		{"lookup fails", "order-at-provider", unreachable, []string{"-charged", paid.ID}, []string{"looking its forwarded key up at the provider failed", "look again later"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.items(t, tt.key, body)
			for _, confirm := range [][]string{nil, {"-confirm", recs[tt.key].LeaseToken}} {
				args := append(append([]string{"settle-order", "-tenant", "acme", "-key", tt.key}, tt.args...), confirm...)
				code, out, errOut := s.oncectl(t, tt.cfg, args...)
				for _, want := range tt.says {
					if code != 1 || !strings.Contains(errOut, want) {
						t.Errorf("settle-order %v = %d %q %q, want 1 saying %q", args[5:], code, out, errOut, want)
					}
				}
			}
			if diff := cmp.Diff(before, s.items(t, tt.key, body)); diff != "" {
				t.Errorf("a refused settle-order wrote (-before +after):\n%s", diff)
			}
		})
	}

	// A refusal, as JSON: the view, not settled, what the provider holds.
	code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-json", "-tenant", "acme", "-key", "order-at-provider", "-not-charged", "-confirm", recs["order-at-provider"].LeaseToken)
	var refused struct {
		settleResult
		Provider string `json:"provider"`
	}
	if err := json.Unmarshal([]byte(out), &refused); err != nil || code != 1 || refused.Settled || !refused.DryRun ||
		refused.LeaseToken != recs["order-at-provider"].LeaseToken || !strings.Contains(refused.Provider, paid.ID) || !strings.Contains(errOut, "a charge exists") {
		t.Errorf("settle-order -json refused = %d %q %q (%v), want 1, one JSON object, not settled, naming %s", code, out, errOut, err, paid.ID)
	}

	for _, tt := range []struct {
		key     string
		args    []string
		status  orders.Status
		answer  int
		charged int
	}{
		{"order-at-provider", []string{"-charged", paid.ID}, orders.StatusPaid, http.StatusCreated, 1},
		{"order-declined-at-provider", []string{"-declined", failed.ID, "-failure-code", "card_declined"}, orders.StatusFailed, http.StatusPaymentRequired, 1},
	} {
		args := append([]string{"settle-order", "-json", "-tenant", "acme", "-key", tt.key, "-confirm", recs[tt.key].LeaseToken}, tt.args...)
		code, out, errOut := s.oncectl(t, s.cfg, args...)
		if got := decodeSettle(t, out); code != 0 || !got.Settled || got.AnswerStatus != tt.answer || got.ProviderCalls != 0 {
			t.Errorf("settle-order %v = %d %q %q, want 0, settled with %d, no call", tt.args, code, out, errOut, tt.answer)
		}
		if n := calls.of(orderForwardKey(t, tt.key, body)); n != 1 {
			t.Errorf("charges made under %s's key = %d, want the one planted", tt.key, n)
		}
		if o := s.effects(t, tt.key, body, tt.status, tt.charged, map[orders.Status]int{orders.StatusPaid: 1}[tt.status]); o.Charge != tt.args[1] {
			t.Errorf("order charge = %q, want %q", o.Charge, tt.args[1])
		}
	}

	// Without the provider: on the operator's word.
	word := s.cfg
	word.ProviderURL = ""
	code, out, errOut = s.oncectl(t, word, "settle-order", "-tenant", "acme", "-key", "order-word", "-charged", "ch_word")
	if code != 1 || !strings.Contains(out, config.EnvProviderURL+" is not set): settled on your word") {
		t.Errorf("dry run without the provider = %d %q %q, want it to say the charge is taken on your word", code, out, errOut)
	}
	if code, out, errOut := s.oncectl(t, word, "settle-order", "-tenant", "acme", "-key", "order-word", "-charged", "ch_word", "-confirm", recs["order-word"].LeaseToken); code != 0 {
		t.Errorf("settle-order without the provider = %d %q %q, want 0", code, out, errOut)
	}
	if o := s.effects(t, "order-word", body, orders.StatusPaid, 0, 1); o.Charge != "ch_word" {
		t.Errorf("order charge = %q, want ch_word", o.Charge)
	}
}

// TestSettleOrderNotCharged: -not-charged makes the order's one call to
// the provider and stores whatever it answers: a decline (402, the order
// failed with its charge), a rejection (422, the order failed without
// one). A call that times out leaves the record UNKNOWN at order_created,
// saying a charge may exist; run again, -not-charged is refused naming
// the charge the provider made, and -charged with it settles the order:
// one charge throughout.
func TestSettleOrderNotCharged(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := settleStack(t, calls.option())
	r := s.ordersReconciler(t)
	for _, tt := range []struct {
		source  string
		answer  int
		code    string
		charged int
	}{
		{"tok_chargeDeclined", http.StatusPaymentRequired, "card_declined", 1},
		{"tok_mastercard", http.StatusUnprocessableEntity, "provider_rejected", 0},
	} {
		t.Run(tt.code, func(t *testing.T) {
			body := orderBody(tt.source, "ada@example.com")
			key := "order-not-charged-" + tt.code
			rec := s.needsReview(t, r, body, key)[key]
			code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-json", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", rec.LeaseToken)
			if got := decodeSettle(t, out); code != 0 || !got.Settled || got.AnswerStatus != tt.answer || got.ProviderCalls != 1 {
				t.Fatalf("settle-order -not-charged = %d %q %q, want 0, settled with %d after 1 call", code, out, errOut, tt.answer)
			}
			done, err := s.record(t, key)
			if err != nil || done.Status != idempotency.StatusCompleted || done.Response.Status != tt.answer || !strings.Contains(string(done.Response.Body), tt.code) {
				t.Fatalf("record = %s %+v, %v; want COMPLETED with %d %s", done.Status, done.Response, err, tt.answer, tt.code)
			}
			o := s.effects(t, key, body, orders.StatusFailed, tt.charged, 0)
			if o.FailureCode != tt.code || (o.Charge != "") != (tt.charged == 1) {
				t.Errorf("order = %s charge %q failure %q, want failed %s", o.Status, o.Charge, o.FailureCode, tt.code)
			}
			if replay := s.order(t, "acme", key, body, nil); replay.status != tt.answer || !bytes.Equal(replay.body, done.Response.Body) {
				t.Errorf("retry = %d %s, want the settled %d %s", replay.status, replay.body, tt.answer, done.Response.Body)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		body := orderBody("tok_timeout", "ada@example.com")
		key := "order-not-charged-timeout"
		fk := orderForwardKey(t, key, body)
		rec := s.needsReview(t, r, body, key)[key]
		code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-json", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", rec.LeaseToken)
		if got := decodeSettle(t, out); code != 1 || got.Settled || got.ProviderCalls != 1 || !strings.Contains(errOut, "may have charged under its forwarded key "+fk) {
			t.Fatalf("settle-order -not-charged, timed out = %d %q %q, want 1, not settled, after 1 call, saying a charge may exist", code, out, errOut)
		}
		left, err := s.record(t, key)
		if err != nil || left.Status != idempotency.StatusUnknown || left.Point != orders.PointOrderCreated {
			t.Fatalf("record = %s at %q, %v; want UNKNOWN at order_created", left.Status, left.Point, err)
		}
		ch, err := s.provider.Lookup(t.Context(), fk)
		if err != nil {
			t.Fatalf("Lookup = %v", err)
		}
		code, out, errOut = s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", left.LeaseToken)
		if code != 1 || !strings.Contains(errOut, "a charge exists") || !strings.Contains(errOut, "use -charged "+ch.ID) {
			t.Errorf("settle-order -not-charged again = %d %q %q, want 1 naming %s", code, out, errOut, ch.ID)
		}
		code, out, errOut = s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-charged", ch.ID, "-confirm", left.LeaseToken)
		if code != 0 {
			t.Fatalf("settle-order -charged %s = %d %q %q, want 0", ch.ID, code, out, errOut)
		}
		if n := calls.of(fk); n != 1 {
			t.Errorf("provider calls = %d, want 1", n)
		}
		if o := s.effects(t, key, body, orders.StatusPaid, 1, 1); o.Charge != ch.ID {
			t.Errorf("order charge = %q, want the provider's %s", o.Charge, ch.ID)
		}
	})
}

// gateDB lets a test step in around one settle-order's DynamoDB writes:
// beforeTWI and afterTWI around its first TransactWriteItems (its phases'
// charge_created, with the order's charge), beforeClaim before its claim
// (the first UpdateItem that marks the record UNKNOWN).
type gateDB struct {
	*dynamodb.Client
	beforeTWI, afterTWI, beforeClaim func()
	twi, claim                       sync.Once
}

func (d *gateDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	first := false
	d.twi.Do(func() { first = true })
	if first && d.beforeTWI != nil {
		d.beforeTWI()
	}
	out, err := d.Client.TransactWriteItems(ctx, in, opts...)
	if first && d.afterTWI != nil {
		d.afterTWI()
	}
	return out, err
}

func (d *gateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if d.beforeClaim != nil && strings.Contains(aws.ToString(in.UpdateExpression), "#unknown_since") {
		d.claim.Do(d.beforeClaim)
	}
	return d.Client.UpdateItem(ctx, in, opts...)
}

// TestSettleOrderSecondClaim: settle B reads the record under the lease
// token settle A claimed it with, and claims it again once A has recorded
// its charge (charge_created): A's completion finds its lease gone. B
// finishes the record with the charge A recorded, calling nothing (exit 0
// when it is B's own outcome, 1 naming it when not), and A reports the
// record completed by another run: never both stopped with the record
// left UNKNOWN at charge_created, the order paid but not finished.
func TestSettleOrderSecondClaim(t *testing.T) {
	calls := providerCalls{path: "/v1/charges"}
	s := settleStack(t, calls.option())
	r := s.ordersReconciler(t)
	body := orderBody("tok_visa", "ada@example.com")
	for _, tt := range []struct {
		name  string
		b     []string
		codeB int
		saysB string
	}{
		{"same outcome", []string{"-charged", "ch_a"}, 0, "settled true"},
		{"another outcome", []string{"-charged", "ch_b"}, 1, "with the charge another run recorded before it, ch_a"},
		{"not charged", []string{"-not-charged"}, 0, "settled true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "order-second-claim-" + strings.ReplaceAll(tt.name, " ", "-")
			rec := s.needsReview(t, r, body, key)[key]
			var codeB int
			var outB, errB bytes.Buffer
			atClaim, claimGo, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
			a := &gateDB{Client: s.client}
			a.beforeTWI = func() { // A claimed, about to record its charge: B reads now
				go func() {
					defer close(bDone)
					cur, err := s.record(t, key)
					if err != nil {
						t.Error(err)
					}
					b := &gateDB{Client: s.client, beforeClaim: func() { close(atClaim); <-claimGo }}
					codeB = operator.New(s.cfg, b, nil, &outB, &errB).WithClock(s.clock.Now).Run(context.Background(),
						append([]string{"settle-order", "-tenant", "acme", "-key", key, "-confirm", cur.LeaseToken}, tt.b...))
				}()
				<-atClaim
			}
			a.afterTWI = func() { close(claimGo); <-bDone }
			var outA, errA bytes.Buffer
			codeA := operator.New(s.cfg, a, nil, &outA, &errA).WithClock(s.clock.Now).Run(t.Context(),
				[]string{"settle-order", "-tenant", "acme", "-key", key, "-charged", "ch_a", "-confirm", rec.LeaseToken})
			if codeA != 1 || !strings.Contains(errA.String(), "completed it, answer 201, charge \"ch_a\" paid: the outcome given") {
				t.Errorf("settle A = %d %q %q, want 1: another run completed it with ch_a, the outcome given", codeA, outA.String(), errA.String())
			}
			if codeB != tt.codeB || !strings.Contains(outB.String()+errB.String(), tt.saysB) {
				t.Errorf("settle B = %d %q %q, want %d saying %q", codeB, outB.String(), errB.String(), tt.codeB, tt.saysB)
			}
			done, err := s.record(t, key)
			if err != nil || done.Status != idempotency.StatusCompleted || done.Response.Status != http.StatusCreated || done.Data["charge"] != "ch_a" {
				t.Fatalf("record = %s at %q %+v, %v; want COMPLETED 201 with ch_a", done.Status, done.Point, done.Response, err)
			}
			if o := s.effects(t, key, body, orders.StatusPaid, 0, 1); o.Charge != "ch_a" || o.RecoveryPoint != orders.PointFinished {
				t.Errorf("order charge %q at %q, want ch_a, finished", o.Charge, o.RecoveryPoint)
			}
			if n := calls.of(orderForwardKey(t, key, body)); n != 0 {
				t.Errorf("provider calls = %d, want 0", n)
			}
		})
	}
}

// TestSettleOrderRedrive: a client's retry redrives the record (a fenced
// MarkUnknown to a new lease token, idempotency.DefaultUnknownRedrive)
// while -not-charged runs. Redriven after the provider's answer is
// recorded (charge_created), the settle finds its lease gone at its
// completion, reads the record again and finishes it with the charge
// recorded: exit 0. Redriven while the provider call is in flight, its
// charge_created is refused: the record stays UNKNOWN at order_created,
// the settle says a charge may exist under the forwarded key, and, run
// again, -not-charged is refused naming it and -charged with it settles
// the order: one charge throughout.
func TestSettleOrderRedrive(t *testing.T) {
	h := &simHook{}
	s := settleStack(t, h.option())
	r := s.ordersReconciler(t)
	store := dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
	body := orderBody("tok_visa", "ada@example.com")
	redrive := func(t *testing.T, key string) {
		cur, err := s.record(t, key)
		if err == nil {
			err = store.MarkUnknown(context.Background(), cur.Key, cur.LeaseToken, idempotency.NewToken(), s.clock.Now().Add(s.cfg.Retention), s.clock.Now())
		}
		if err != nil {
			t.Errorf("redrive: %v", err)
		}
	}

	t.Run("after charge_created", func(t *testing.T) {
		key := "order-redrive-recorded"
		rec := s.needsReview(t, r, body, key)[key]
		db := &gateDB{Client: s.client, afterTWI: func() { redrive(t, key) }}
		var out, errOut bytes.Buffer
		code := operator.New(s.cfg, db, nil, &out, &errOut).WithClock(s.clock.Now).Run(t.Context(),
			[]string{"settle-order", "-json", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", rec.LeaseToken})
		if got := decodeSettle(t, out.String()); code != 0 || !got.Settled || got.AnswerStatus != http.StatusCreated || got.ProviderCalls != 1 {
			t.Errorf("settle-order = %d %q %q, want 0: settled from the charge recorded", code, out.String(), errOut.String())
		}
		ch, err := s.provider.Lookup(t.Context(), orderForwardKey(t, key, body))
		if err != nil {
			t.Fatal(err)
		}
		done, err := s.record(t, key)
		if err != nil || done.Status != idempotency.StatusCompleted || done.Data["charge"] != ch.ID {
			t.Fatalf("record = %s %v, %v; want COMPLETED with %s", done.Status, done.Data, err, ch.ID)
		}
		if o := s.effects(t, key, body, orders.StatusPaid, 1, 1); o.Charge != ch.ID {
			t.Errorf("order charge = %q, want %q", o.Charge, ch.ID)
		}
	})

	t.Run("during the provider call", func(t *testing.T) {
		key := "order-redrive-in-flight"
		fk := orderForwardKey(t, key, body)
		rec := s.needsReview(t, r, body, key)[key]
		var once sync.Once
		h.set(func(w http.ResponseWriter, req *http.Request, next http.Handler) bool {
			next.ServeHTTP(w, req) // charged
			once.Do(func() { redrive(t, key) })
			return true
		})
		code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", rec.LeaseToken)
		h.set(nil)
		if code != 1 || !strings.Contains(errOut, "may have charged under its forwarded key "+fk) || !strings.Contains(errOut, "-not-charged is safe") {
			t.Errorf("settle-order = %d %q %q, want 1 saying a charge may exist under %s", code, out, errOut, fk)
		}
		left, err := s.record(t, key)
		if err != nil || left.Status != idempotency.StatusUnknown || left.Point != orders.PointOrderCreated {
			t.Fatalf("record = %s at %q, %v; want UNKNOWN at order_created", left.Status, left.Point, err)
		}
		ch, err := s.provider.Lookup(t.Context(), fk)
		if err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-not-charged", "-confirm", left.LeaseToken); code != 1 || !strings.Contains(errOut, "use -charged "+ch.ID) {
			t.Errorf("settle-order -not-charged again = %d %q %q, want 1 naming %s", code, out, errOut, ch.ID)
		}
		if code, out, errOut := s.oncectl(t, s.cfg, "settle-order", "-tenant", "acme", "-key", key, "-charged", ch.ID, "-confirm", left.LeaseToken); code != 0 {
			t.Fatalf("settle-order -charged %s = %d %q %q, want 0", ch.ID, code, out, errOut)
		}
		if o := s.effects(t, key, body, orders.StatusPaid, 1, 1); o.Charge != ch.ID {
			t.Errorf("order charge = %q, want %q", o.Charge, ch.ID)
		}
	})
}
