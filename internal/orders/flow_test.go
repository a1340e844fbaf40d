package orders

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/provider"
)

// countingCharger counts its calls and answers each that nothing was
// charged, so that a phase that calls it stops there, writing nothing.
type countingCharger struct{ calls int }

func (c *countingCharger) Charge(context.Context, string, provider.ChargeRequest) (provider.Charge, error) {
	c.calls++
	return provider.Charge{}, fmt.Errorf("test: %w", provider.ErrNotCharged)
}

// storedOrders is a Reader of one stored order, or of err.
type storedOrders struct {
	order Order
	err   error
	reads int
}

func (r *storedOrders) Get(_ context.Context, tenant, id string) (Order, error) {
	r.reads++
	if r.err != nil {
		return Order{}, r.err
	}
	if r.order.PK != PK(tenant, id) {
		return Order{}, fmt.Errorf("test: %w", ErrNotFound)
	}
	return r.order, nil
}

// TestKeyRetention: the phase charge_created, resumed, calls the provider
// only while the request is younger than Flow.KeyRetention less
// KeyRetentionMargin, its age counted from the earliest of the record's
// creation, the order's its data records and the stored order's (the first
// request's, earlier when the request was re-sent after its record expired;
// the record's data alone when the record has no creation time);
// older, it calls nothing and returns ErrKeyRetention, which the Resolver
// wraps in idempotency.ErrUnresolvable.
func TestKeyRetention(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req := Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa", Email: "a@example.com"}
	tests := []struct {
		name      string
		retention time.Duration
		recordAge time.Duration // -1: the record has no CreatedAt
		orderAge  time.Duration // the record data's
		storedAge time.Duration // the stored order's (orderAge when zero)
		refused   bool
	}{
		{"young", 24 * time.Hour, time.Minute, time.Minute, 0, false},
		{"just under the margin", 24 * time.Hour, 23*time.Hour - time.Second, 23*time.Hour - time.Second, 0, false},
		{"at the margin", 24 * time.Hour, 23 * time.Hour, 23 * time.Hour, 0, true},
		{"days old", 24 * time.Hour, 72 * time.Hour, 72 * time.Hour, 0, true},
		{"record younger than its order", 24 * time.Hour, time.Hour, 23 * time.Hour, 0, true},
		{"order younger than its record", 24 * time.Hour, 23 * time.Hour, time.Hour, 0, true},
		{"record without CreatedAt, old order", 24 * time.Hour, -1, 25 * time.Hour, 0, true},
		{"record without CreatedAt, young order", 24 * time.Hour, -1, time.Hour, 0, false},
		{"re-sent after its record expired: the stored order is the first request's", 24 * time.Hour, time.Minute, time.Minute, 49 * time.Hour, true},
		{"re-sent young", 24 * time.Hour, time.Minute, time.Minute, 2 * time.Hour, false},
		{"provider never forgets", 0, 1000 * time.Hour, 1000 * time.Hour, 0, false},
		{"short retention: half of it as the margin", time.Hour, 29 * time.Minute, 29 * time.Minute, 0, false},
		{"short retention, past half", time.Hour, 30 * time.Minute, 30 * time.Minute, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", "order-1"), Status: idempotency.StatusUnknown, Route: RouteCreate,
				External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour),
				Point: PointOrderCreated, Request: []byte(`{}`), UpdatedAt: now,
				Data: map[string]string{dataOrder: "ord_abcdefghijklmnopqrstuvwx", dataCreated: strconv.FormatInt(now.Add(-tt.orderAge).Unix(), 10)},
			}
			if tt.recordAge >= 0 {
				rec.CreatedAt = now.Add(-tt.recordAge)
			}
			storedAge := tt.storedAge
			if storedAge == 0 {
				storedAge = tt.orderAge
			}
			stored := &storedOrders{order: New("acme", "ord_abcdefghijklmnopqrstuvwx", req, now.Add(-storedAge))}
			var c countingCharger
			f := Flow{Provider: &c, Reader: stored, Orders: "orders", Outbox: "outbox", KeyRetention: tt.retention, Now: func() time.Time { return now }}
			_, _, err := f.Run(t.Context(), idempotency.ResumeSteps(memory.New(), rec, func() time.Time { return now }), req, nil)
			if got := errors.Is(err, ErrKeyRetention); got != tt.refused || c.calls != map[bool]int{false: 1}[tt.refused] {
				t.Errorf("Run() = %v after %d provider call(s); want ErrKeyRetention %v", err, c.calls, tt.refused)
			}

			rec.Request = []byte(`{"amount": 4200, "currency": "eur", "customer": "cus_42", "source": "tok_visa", "email": "a@example.com"}`)
			c.calls = 0
			_, err = NewResolver(memory.New(), Flow{Provider: &c, Reader: stored, KeyRetention: tt.retention}, func() time.Time { return now }).Resolve(t.Context(), rec)
			unresolvable := errors.Is(err, idempotency.ErrUnresolvable) && errors.Is(err, ErrKeyRetention)
			if unresolvable != tt.refused || c.calls != map[bool]int{false: 1}[tt.refused] {
				t.Errorf("Resolve() = %v after %d provider call(s); want ErrUnresolvable wrapping ErrKeyRetention %v", err, c.calls, tt.refused)
			}
		})
	}
}

// TestChargeReadsOrder: the phase charge_created calls the provider only
// once it has read the order. A read that fails (the store unavailable) or
// an order that is not stored calls nothing: the first is an error the
// handler answers 503 and the Resolver's caller retries, the second is
// ErrUnresolvable.
func TestChargeReadsOrder(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req := Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa", Email: "a@example.com"}
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "order-1"), Status: idempotency.StatusUnknown, Route: RouteCreate,
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour), CreatedAt: now,
		Point: PointOrderCreated, UpdatedAt: now,
		Request: []byte(`{"amount": 4200, "currency": "eur", "customer": "cus_42", "source": "tok_visa", "email": "a@example.com"}`),
		Data:    map[string]string{dataOrder: "ord_abcdefghijklmnopqrstuvwx", dataCreated: strconv.FormatInt(now.Unix(), 10)},
	}
	tests := []struct {
		name         string
		reader       *storedOrders
		want         error
		unresolvable bool
	}{
		{"store unavailable", &storedOrders{err: fmt.Errorf("test: %w", idempotency.ErrUnavailable)}, idempotency.ErrUnavailable, false},
		{"order not stored", &storedOrders{}, ErrNotFound, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c countingCharger
			f := Flow{Provider: &c, Reader: tt.reader, Orders: "orders", Outbox: "outbox", KeyRetention: 24 * time.Hour, Now: func() time.Time { return now }}
			_, _, err := f.Run(t.Context(), idempotency.ResumeSteps(memory.New(), rec, func() time.Time { return now }), req, nil)
			if !errors.Is(err, tt.want) || errors.Is(err, idempotency.ErrUnresolvable) != tt.unresolvable || c.calls != 0 || tt.reader.reads != 1 {
				t.Errorf("Run() = %v after %d read(s), %d provider call(s); want %v (unresolvable %v) after 1 read, 0 calls", err, tt.reader.reads, c.calls, tt.want, tt.unresolvable)
			}
			_, err = NewResolver(memory.New(), f, func() time.Time { return now }).Resolve(t.Context(), rec)
			if !errors.Is(err, tt.want) || errors.Is(err, idempotency.ErrUnresolvable) != tt.unresolvable || c.calls != 0 {
				t.Errorf("Resolve() = %v after %d provider call(s); want %v (unresolvable %v), 0 calls", err, c.calls, tt.want, tt.unresolvable)
			}
		})
	}
	var c countingCharger
	if _, _, err := (Flow{Provider: &c}).Run(t.Context(), idempotency.ResumeSteps(memory.New(), rec, func() time.Time { return now }), req, nil); err == nil || c.calls != 0 {
		t.Errorf("Run() without a Reader = %v after %d provider call(s), want an error and 0 calls", err, c.calls)
	}
}

// answerCharger answers every call with its charge and error.
type answerCharger struct {
	charge provider.Charge
	err    error
}

func (c answerCharger) Charge(context.Context, string, provider.ChargeRequest) (provider.Charge, error) {
	return c.charge, c.err
}

// TestChargeWithoutID: a provider answer whose charge has no ID, declined
// or not, is ErrDrift (the outcome left to reconciliation), never recorded
// on the order: an order failed with no charge reads as one the provider
// rejected, so a re-send of a decline recorded so would answer 422, not its
// 402.
func TestChargeWithoutID(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req := Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa", Email: "a@example.com"}
	o := New("acme", "ord_abcdefghijklmnopqrstuvwx", req, now)
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "order-1"), Status: idempotency.StatusUnknown, Route: RouteCreate,
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour), CreatedAt: now,
		Point: PointOrderCreated, UpdatedAt: now,
		Data: map[string]string{dataOrder: o.ID, dataCreated: strconv.FormatInt(now.Unix(), 10)},
	}
	charge := provider.Charge{Amount: req.Amount, Currency: req.Currency}
	tests := []struct {
		name    string
		charger answerCharger
	}{
		{"succeeded", answerCharger{charge: provider.Charge{Amount: req.Amount, Currency: req.Currency, Status: provider.StatusSucceeded}}},
		{"declined", answerCharger{err: &provider.DeclinedError{Charge: provider.Charge{Amount: charge.Amount, Currency: charge.Currency, Status: provider.StatusFailed, FailureCode: "card_declined"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Flow{Provider: tt.charger, Reader: &storedOrders{order: o}, Orders: "orders", Outbox: "outbox", Now: func() time.Time { return now }}
			_, _, err := f.Run(t.Context(), idempotency.ResumeSteps(memory.New(), rec, func() time.Time { return now }), req, nil)
			if !errors.Is(err, ErrDrift) {
				t.Errorf("Run() = %v, want ErrDrift", err)
			}
		})
	}
}

// slowOrders is a Reader that takes delay to read.
type slowOrders struct {
	storedOrders
	delay time.Duration
}

func (r *slowOrders) Get(ctx context.Context, tenant, id string) (Order, error) {
	time.Sleep(r.delay)
	return r.storedOrders.Get(ctx, tenant, id)
}

// TestChargeNeedsTimeForCall: the phase charge_created, live or resumed,
// calls the provider only when the request's deadline leaves the call its
// Flow.Timeout once the order is read: a read that took the time calls
// nothing and returns ErrNoTimeForCall, which is idempotency.ErrUnavailable
// (503, the lease given up; the reconciler retries), never ErrUnresolvable.
func TestChargeNeedsTimeForCall(t *testing.T) {
	now := time.Now()
	req := Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa", Email: "a@example.com"}
	o := New("acme", "ord_abcdefghijklmnopqrstuvwx", req, now)
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "order-1"), Status: idempotency.StatusUnknown, Route: RouteCreate,
		External: true, LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(time.Hour), CreatedAt: now,
		Point: PointOrderCreated, UpdatedAt: now,
		Request: []byte(`{"amount": 4200, "currency": "eur", "customer": "cus_42", "source": "tok_visa", "email": "a@example.com"}`),
		Data:    map[string]string{dataOrder: o.ID, dataCreated: strconv.FormatInt(now.Unix(), 10)},
	}
	const timeout = time.Second
	tests := []struct {
		name     string
		deadline time.Duration // from the start; 0: none
		read     time.Duration
		timeout  time.Duration
		called   bool
	}{
		{name: "no deadline", read: 0, timeout: timeout, called: true},
		{name: "time enough after a fast read", deadline: 3 * timeout, timeout: timeout, called: true},
		{name: "time taken by a slow read", deadline: 3 * timeout, read: 5 * timeout / 2, timeout: timeout},
		{name: "less than the call from the start", deadline: timeout / 2, timeout: timeout},
		{name: "no Timeout to compare", deadline: timeout / 2, called: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(name string, f func(ctx context.Context, fl Flow) error) {
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				var c countingCharger
				fl := Flow{Provider: &c, Reader: &slowOrders{storedOrders: storedOrders{order: o}, delay: tt.read},
					Orders: "orders", Outbox: "outbox", Timeout: tt.timeout}
				err := f(ctx, fl)
				if tt.called {
					if c.calls != 1 || errors.Is(err, ErrNoTimeForCall) {
						t.Errorf("%s() = %v after %d provider call(s); want 1 call", name, err, c.calls)
					}
					return
				}
				if c.calls != 0 || !errors.Is(err, ErrNoTimeForCall) || !errors.Is(err, idempotency.ErrUnavailable) || errors.Is(err, idempotency.ErrUnresolvable) {
					t.Errorf("%s() = %v after %d provider call(s); want ErrNoTimeForCall (ErrUnavailable, not ErrUnresolvable) and no call", name, err, c.calls)
				}
			}
			run("Run", func(ctx context.Context, fl Flow) error {
				_, _, err := fl.Run(ctx, idempotency.ResumeSteps(memory.New(), rec, nil), req, nil)
				return err
			})
			run("Resolve", func(ctx context.Context, fl Flow) error {
				_, err := NewResolver(memory.New(), fl, nil).Resolve(ctx, rec)
				return err
			})
		})
	}
}

// TestRecordKeyRemembered: an order request's forwarded key is remembered
// while its age, from the earliest of the record's creation, the first
// phase's recorded order creation and the stored order's, is below the
// retention less its margin; kept for ever (0), always; with no creation
// known, it counts as new.
func TestRecordKeyRemembered(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	rec := func(created time.Time, data int64) idempotency.Record {
		r := idempotency.Record{CreatedAt: created, Data: map[string]string{}}
		if data > 0 {
			r.Data[dataCreated] = strconv.FormatInt(data, 10)
		}
		return r
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name      string
		rec       idempotency.Record
		stored    int64
		retention time.Duration
		want      bool
	}{
		{"young", rec(ago(time.Hour), ago(time.Hour).Unix()), 0, 24 * time.Hour, true},
		{"at the limit", rec(ago(23*time.Hour), ago(23*time.Hour).Unix()), 0, 24 * time.Hour, false},
		{"old by its record", rec(ago(23*time.Hour), ago(time.Hour).Unix()), 0, 24 * time.Hour, false},
		{"old by its recorded order", rec(ago(time.Hour), ago(23*time.Hour).Unix()), 0, 24 * time.Hour, false},
		{"old by its stored order", rec(ago(time.Hour), ago(time.Hour).Unix()), ago(30 * time.Hour).Unix(), 24 * time.Hour, false},
		{"short retention: half of it", rec(ago(31*time.Minute), ago(31*time.Minute).Unix()), 0, time.Hour, false},
		{"kept for ever", rec(ago(1000*time.Hour), ago(1000*time.Hour).Unix()), 0, 0, true},
		{"no creation known", rec(time.Time{}, 0), 0, 24 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, got := RecordKeyRemembered(tt.rec, Order{Created: tt.stored}, tt.retention, now); got != tt.want {
				t.Errorf("RecordKeyRemembered = %v, want %v", got, tt.want)
			}
		})
	}
}
