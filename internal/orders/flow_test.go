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

// TestKeyRetention: the phase charge_created, resumed, calls the provider
// only while the request is younger than Flow.KeyRetention less
// KeyRetentionMargin, its age counted from the earlier of the record's and
// the order's creation (the order's alone when the record has none);
// older, it calls nothing and returns ErrKeyRetention, which the Resolver
// wraps in idempotency.ErrUnresolvable.
func TestKeyRetention(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	req := Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa", Email: "a@example.com"}
	tests := []struct {
		name      string
		retention time.Duration
		recordAge time.Duration // -1: the record has no CreatedAt
		orderAge  time.Duration
		refused   bool
	}{
		{"young", 24 * time.Hour, time.Minute, time.Minute, false},
		{"just under the margin", 24 * time.Hour, 23*time.Hour - time.Second, 23*time.Hour - time.Second, false},
		{"at the margin", 24 * time.Hour, 23 * time.Hour, 23 * time.Hour, true},
		{"days old", 24 * time.Hour, 72 * time.Hour, 72 * time.Hour, true},
		{"record younger than its order", 24 * time.Hour, time.Hour, 23 * time.Hour, true},
		{"order younger than its record", 24 * time.Hour, 23 * time.Hour, time.Hour, true},
		{"record without CreatedAt, old order", 24 * time.Hour, -1, 25 * time.Hour, true},
		{"record without CreatedAt, young order", 24 * time.Hour, -1, time.Hour, false},
		{"provider never forgets", 0, 1000 * time.Hour, 1000 * time.Hour, false},
		{"short retention: half of it as the margin", time.Hour, 29 * time.Minute, 29 * time.Minute, false},
		{"short retention, past half", time.Hour, 30 * time.Minute, 30 * time.Minute, true},
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
			var c countingCharger
			f := Flow{Provider: &c, Orders: "orders", Outbox: "outbox", KeyRetention: tt.retention, Now: func() time.Time { return now }}
			_, _, err := f.Run(t.Context(), idempotency.ResumeSteps(memory.New(), rec, func() time.Time { return now }), req, nil)
			if got := errors.Is(err, ErrKeyRetention); got != tt.refused || c.calls != map[bool]int{false: 1}[tt.refused] {
				t.Errorf("Run() = %v after %d provider call(s); want ErrKeyRetention %v", err, c.calls, tt.refused)
			}

			rec.Request = []byte(`{"amount": 4200, "currency": "eur", "customer": "cus_42", "source": "tok_visa", "email": "a@example.com"}`)
			c.calls = 0
			_, err = NewResolver(memory.New(), Flow{Provider: &c, KeyRetention: tt.retention}, func() time.Time { return now }).Resolve(t.Context(), rec)
			unresolvable := errors.Is(err, idempotency.ErrUnresolvable) && errors.Is(err, ErrKeyRetention)
			if unresolvable != tt.refused || c.calls != map[bool]int{false: 1}[tt.refused] {
				t.Errorf("Resolve() = %v after %d provider call(s); want ErrUnresolvable wrapping ErrKeyRetention %v", err, c.calls, tt.refused)
			}
		})
	}
}
