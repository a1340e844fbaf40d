package recovery_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
)

// TestSettleWhileClientRetries: an External request whose call out never
// reached the other system goes UNKNOWN, and its client retries every 30 s
// as its 409s tell it to, so that every UnknownRedrive (the default, a
// minute) a retry re-announces the record under a new lease token. The
// reconciler finds nothing at the other system and must not release the
// key before Settle has passed since the record first went UNKNOWN (the
// call may still land until then), but must release it soon after,
// whatever the redrives did meanwhile: a redrive calls nothing out, so it
// does not move the settle wait. The stream is modelled as Lambda runs it:
// the images in order, one that cannot be settled yet (the invocation
// cannot wait Settle) retried at the next tick. The retry after the release
// runs the request again, now reaching the other system: one effect there,
// never two.
func TestSettleWhileClientRetries(t *testing.T) {
	const (
		tick  = 30 * time.Second // the client's retry interval, and the stream's retry of a deferred image
		slack = time.Minute      // how late after Settle the key may be released
		limit = 30 * time.Minute // how long the client retries before the test gives up
	)
	for _, tt := range []struct {
		name   string
		settle time.Duration
	}{
		{"settle shorter than the redrive", 30 * time.Second},
		{"settle longer than the redrive", 90 * time.Second},
		{"settle five redrives long", 5 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := start
			now := func() time.Time { return clock }
			effects := map[string]int{} // the other system's charges, by forward key
			runs := 0
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				if runs++; runs == 1 {
					call.Unknown() // the call out timed out before it reached the other system
					w.WriteHeader(http.StatusGatewayTimeout)
					return
				}
				effects[call.Record().ForwardKey()]++
				w.WriteHeader(http.StatusCreated)
			})
			resolver := idempotency.ResolverFunc(func(_ context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
				if effects[rec.ForwardKey()] > 0 {
					return idempotency.Resolution{Response: &idempotency.Response{Status: http.StatusCreated, Body: []byte{}}}, nil
				}
				return idempotency.Resolution{}, nil // nothing happened there
			})
			mw, err := idempotency.New(idempotency.Config{Store: store, Now: now,
				Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			route := "POST /v1/charges"
			h := mw.External(route, handler, resolver)
			rc, err := recovery.NewReconciler(recovery.ReconcilerConfig{Store: store, Settle: tt.settle, Now: now,
				Resolvers: idempotency.Resolvers{route: resolver}})
			if err != nil {
				t.Fatal(err)
			}
			key := idempotency.NewKey("acme", "charge-1")
			post := func() int {
				r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":100}`))
				r.Header.Set(idempotency.Header, "charge-1")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			var images []idempotency.Record // the stream's UNKNOWN images, in order
			capture := func() {
				rec, err := store.Get(t.Context(), key)
				if err == nil && rec.Status == idempotency.StatusUnknown &&
					(len(images) == 0 || images[len(images)-1].LeaseToken != rec.LeaseToken) {
					images = append(images, rec)
				}
			}
			// reconcile hands the reconciler the images it has not finished,
			// in order, as an invocation that cannot wait Settle: it stops at
			// one deferred, which the stream delivers again later.
			next := 0
			reconcile := func() {
				for ; next < len(images); next++ {
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					err := rc.Reconcile(ctx, nil, images[next])
					cancel()
					if err != nil {
						return
					}
				}
			}

			if code := post(); code != http.StatusGatewayTimeout {
				t.Fatalf("first attempt = %d, want %d", code, http.StatusGatewayTimeout)
			}
			capture()
			if len(images) != 1 {
				t.Fatalf("after the first attempt: no UNKNOWN record")
			}
			unknownAt := images[0].UpdatedAt
			var released time.Time
			code := 0
			for clock.Sub(start) < limit {
				clock = clock.Add(tick)
				if code = post(); code != http.StatusConflict {
					break
				}
				capture()
				reconcile()
				if _, err := store.Get(t.Context(), key); errors.Is(err, idempotency.ErrNotFound) && released.IsZero() {
					released = clock
				}
			}
			if code != http.StatusCreated {
				t.Fatalf("after %v of retries every %v (%d UNKNOWN images, %d finished by the reconciler): the retry answers %d, want %d: the key never settled",
					clock.Sub(unknownAt), tick, len(images), next, code, http.StatusCreated)
			}
			if released.IsZero() || released.Before(unknownAt.Add(tt.settle)) || released.After(unknownAt.Add(tt.settle+slack)) {
				t.Errorf("key released %v after it went UNKNOWN, want between Settle (%v) and Settle + %v", released.Sub(unknownAt), tt.settle, slack)
			}
			if got := effects[images[0].ForwardKey()]; got != 1 || len(effects) != 1 {
				t.Errorf("effects at the other system = %v, want one under the request's forward key", effects)
			}
			if runs != 2 {
				t.Errorf("handler ran %d times, want 2 (the unknown attempt, the retry after the release)", runs)
			}
		})
	}
}

// TestSettleMeasuredFrom: the reconciler's settle wait runs from when the
// record first went UNKNOWN (Record.UnknownSince), not from its last
// change; a record without it (written UNKNOWN before stores kept it)
// falls back to its UpdatedAt. A "nothing happened" found before the wait
// is over, by an invocation that cannot wait, defers the record.
func TestSettleMeasuredFrom(t *testing.T) {
	const settle = 5 * time.Minute
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name           string
		since, updated time.Time
		wantReleased   bool
	}{
		{"unknown for Settle, redriven just now", now.Add(-settle), now.Add(-time.Second), true},
		{"unknown for less than Settle, redriven just now", now.Add(-settle + time.Second), now.Add(-time.Second), false},
		{"unknown for Settle, redriven since", now.Add(-settle), now.Add(-2 * time.Minute), true},
		{"without UnknownSince, updated Settle ago", time.Time{}, now.Add(-settle), true},
		{"without UnknownSince, updated just now", time.Time{}, now.Add(-time.Second), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			rec := idempotency.Record{
				Key: idempotency.NewKey("acme", "settle"), Status: idempotency.StatusUnknown, Route: "POST /v1/charges",
				Fingerprint: "fp", External: true, LeaseToken: "lease", ExpiresAt: now.Add(time.Hour), Request: []byte(`{}`),
				CreatedAt: now.Add(-time.Hour), UpdatedAt: tt.updated, UnknownSince: tt.since,
			}
			if err := store.Reserve(t.Context(), rec, nil, now); err != nil {
				t.Fatal(err)
			}
			rec, err := store.Get(t.Context(), rec.Key)
			if err != nil {
				t.Fatal(err)
			}
			nothing := idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
				return idempotency.Resolution{}, nil
			})
			rc, err := recovery.NewReconciler(recovery.ReconcilerConfig{Store: store, Settle: settle,
				Now: func() time.Time { return now }, Resolvers: idempotency.Resolvers{rec.Route: nothing}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second) // too short to wait
			defer cancel()
			err = rc.Reconcile(ctx, nil, rec)
			_, getErr := store.Get(t.Context(), rec.Key)
			released := errors.Is(getErr, idempotency.ErrNotFound)
			if released != tt.wantReleased || (err == nil) != tt.wantReleased {
				t.Errorf("Reconcile = %v, released %v; want released %v (deferred otherwise)", err, released, tt.wantReleased)
			}
		})
	}
}

// TestSettleAfterResolverAdvance: a Resolver resuming a multi-step
// request's phases (ResumeSteps) advances the UNKNOWN record to its next
// point before that phase calls out; if the call's outcome is lost and a
// later Reconcile finds nothing, the settle wait runs from that Advance,
// not from when the record first went UNKNOWN, long before: the other
// system may still apply the phase's call.
func TestSettleAfterResolverAdvance(t *testing.T) {
	const settle = 5 * time.Minute
	first := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	advanced := first.Add(10 * time.Minute)
	store := memory.New()
	rec := idempotency.Record{
		Key: idempotency.NewKey("acme", "resumed"), Status: idempotency.StatusUnknown, Route: "POST /v1/orders",
		Fingerprint: "fp", External: true, LeaseToken: "lease", ExpiresAt: first.Add(time.Hour), Request: []byte(`{}`),
		Point: "a", CreatedAt: first.Add(-time.Minute), UpdatedAt: first, UnknownSince: first,
	}
	if err := store.Reserve(t.Context(), rec, nil, first); err != nil {
		t.Fatal(err)
	}
	// The Resolver commits phase b, then phase c's call times out.
	p := idempotency.Progress{From: "a", Point: "b", LeaseToken: "resumed", ExpiresAt: advanced.Add(time.Hour),
		UpdatedAt: advanced, Status: idempotency.StatusUnknown, External: true}
	if err := store.Advance(t.Context(), rec.Key, "lease", p, nil); err != nil {
		t.Fatal(err)
	}
	image, err := store.Get(t.Context(), rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at           time.Time
		wantReleased bool
	}{
		{advanced.Add(time.Second), false},
		{advanced.Add(settle), true},
	} {
		t.Run(tt.at.Sub(advanced).String()+" after the Advance", func(t *testing.T) {
			nothing := idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
				return idempotency.Resolution{}, nil
			})
			rc, err := recovery.NewReconciler(recovery.ReconcilerConfig{Store: store, Settle: settle,
				Now: func() time.Time { return tt.at }, Resolvers: idempotency.Resolvers{rec.Route: nothing}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Second) // too short to wait
			defer cancel()
			err = rc.Reconcile(ctx, nil, image)
			_, getErr := store.Get(t.Context(), rec.Key)
			released := errors.Is(getErr, idempotency.ErrNotFound)
			if released != tt.wantReleased || (err == nil) != tt.wantReleased {
				t.Errorf("Reconcile = %v, released %v; want released %v (deferred otherwise)", err, released, tt.wantReleased)
			}
		})
	}
}
