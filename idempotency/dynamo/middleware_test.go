package dynamo_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
)

// The middleware over this store: what it answers, and leaves stored, when
// DynamoDB refuses a write.

// newMiddleware returns a Middleware on store for tenant "acme".
func newMiddleware(t *testing.T, store idempotency.Store) *idempotency.Middleware {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// wrap wraps handler under route in mode; an External route's resolver
// fails the test when asked.
func wrap(t *testing.T, mw *idempotency.Middleware, mode idempotency.Mode, route string, handler http.Handler) http.Handler {
	if mode == idempotency.External {
		return mw.External(route, handler, unresolved(t))
	}
	return mw.Wrap(mode, route, handler)
}

// post sends a POST with body under key to h and returns the answer and the
// middleware's observation.
func post(h http.Handler, key, body string) (*httptest.ResponseRecorder, idempotency.Observation) {
	var obs idempotency.Observation
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, obs
}

// TestTooLargeAnswer: an answer larger than the store keeps is 500
// response_too_large. In Leased mode nothing happened outside the store:
// the reservation is released and a retry executes again. In External mode
// the call out happened: the record is completed with that 500 as its
// final answer (with the effects), so the key is neither left reserved nor
// executed again, and a retry replays the 500.
func TestTooLargeAnswer(t *testing.T) {
	store, client, names := newStore(t)
	mw := newMiddleware(t, store)
	payments := names.ByLogicalID["PaymentsTable"]
	tests := []struct {
		mode        idempotency.Mode
		wantRecord  bool // COMPLETED with the 500
		wantEffects bool
		wantRuns    int // after the retry
	}{
		{mode: idempotency.Leased, wantRuns: 2},
		{mode: idempotency.External, wantRecord: true, wantEffects: true, wantRuns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			key := idempotency.NewKey("acme", t.Name())
			runs := 0
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				runs++
				call.AddEffect(dynamo.Insert(payments, "pk", map[string]string{"pk": key.ID()}))
				w.WriteHeader(http.StatusCreated)
				if runs == 1 {
					body := make([]byte, dynamo.MaxStoredBody+1)
					rand.Read(body) // incompressible
					w.Write(body)
				}
			})
			var h http.Handler
			if tt.mode == idempotency.External {
				h = mw.External("POST /v1/"+tt.mode.String(), handler, unresolved(t))
			} else {
				h = mw.Wrap(tt.mode, "POST /v1/"+tt.mode.String(), handler)
			}

			w, obs := post(h, t.Name(), `{}`)
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"code":"response_too_large"`) {
				t.Errorf("too large answer = %d (%d bytes), want 500 response_too_large", w.Code, w.Body.Len())
			}
			if obs.Outcome != idempotency.OutcomeStoreError || !strings.Contains(obs.Err, "too large") {
				t.Errorf("observation: outcome %s, err %q; want store_error saying the answer is too large", obs.Outcome, obs.Err)
			}
			rec, err := store.Get(t.Context(), key)
			switch {
			case !tt.wantRecord && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record after a too-large answer: %s (err %v), want none", rec.Status, err)
			case tt.wantRecord && (err != nil || rec.Status != idempotency.StatusCompleted || rec.Response.Status != http.StatusInternalServerError ||
				string(rec.Response.Body) != w.Body.String()):
				t.Errorf("record after a too-large answer: %s %+v (err %v), want COMPLETED with the 500 sent", rec.Status, rec.Response, err)
			}
			if got := dynamotest.Exists(t, client, payments, key.ID()); got != tt.wantEffects {
				t.Errorf("effect written: %v, want %v", got, tt.wantEffects)
			}

			again, _ := post(h, t.Name(), `{}`)
			switch {
			case tt.wantRecord && (again.Code != w.Code || again.Body.String() != w.Body.String() || again.Header().Get(idempotency.ReplayedHeader) != "true"):
				t.Errorf("retry = %d %s (replayed %q), want the 500 replayed", again.Code, again.Body, again.Header().Get(idempotency.ReplayedHeader))
			case !tt.wantRecord && again.Code != http.StatusCreated:
				t.Errorf("retry = %d %s, want 201 (executed again)", again.Code, again.Body)
			}
			if runs != tt.wantRuns {
				t.Errorf("handler ran %d times, want %d", runs, tt.wantRuns)
			}
		})
	}
}

// TestStoreFailureAnswers: only a store that is unavailable (unreachable,
// throttled) answers 503 store_unavailable with Retry-After, which tells
// clients to retry. A misconfiguration or a bug (a missing table, a write
// DynamoDB refuses as invalid) is 500 internal_error with no Retry-After,
// its cause in the observation (the log line), and nothing is written.
func TestStoreFailureAnswers(t *testing.T) {
	store, client, names := newStore(t)
	missing := dynamo.New(client, "once-no-such-table")
	payments := names.ByLogicalID["PaymentsTable"]
	tests := []struct {
		name       string
		store      idempotency.Store
		mode       idempotency.Mode
		effect     idempotency.Effect
		wantStatus int
		wantCode   string
		wantErr    string // in the observation
	}{
		{"missing table, atomic", missing, idempotency.Atomic, nil, 500, "internal_error", "ResourceNotFoundException"},
		{"missing table, leased", missing, idempotency.Leased, nil, 500, "internal_error", "ResourceNotFoundException"},
		{"missing table, external", missing, idempotency.External, nil, 500, "internal_error", "ResourceNotFoundException"},
		{"invalid write, atomic", store, idempotency.Atomic, dynamo.Insert(payments, "pk", map[string]int{"pk": 1}), 500, "internal_error", "ValidationError"},
		{"invalid write, leased", store, idempotency.Leased, dynamo.Insert(payments, "pk", map[string]int{"pk": 1}), 500, "internal_error", "ValidationError"},
		{"unreachable", unreachable(t), idempotency.Atomic, nil, 503, "store_unavailable", "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				if tt.effect != nil {
					call.AddEffect(tt.effect)
				}
				w.WriteHeader(http.StatusCreated)
			})
			mw := newMiddleware(t, tt.store)
			var h http.Handler
			if tt.mode == idempotency.External {
				h = mw.External("POST /v1/things", handler, unresolved(t))
			} else {
				h = mw.Wrap(tt.mode, "POST /v1/things", handler)
			}
			w, obs := post(h, t.Name(), `{}`)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), `"code":"`+tt.wantCode+`"`) {
				t.Errorf("answer = %d %s, want %d %s", w.Code, w.Body, tt.wantStatus, tt.wantCode)
			}
			if got, want := w.Header().Get("Retry-After") != "", tt.wantStatus == 503; got != want {
				t.Errorf("Retry-After %q, want one: %v", w.Header().Get("Retry-After"), want)
			}
			if obs.Outcome != idempotency.OutcomeStoreError || !strings.Contains(obs.Err, tt.wantErr) {
				t.Errorf("observation: outcome %s, err %q; want store_error naming %s", obs.Outcome, obs.Err, tt.wantErr)
			}
			if tt.store == store && tt.mode == idempotency.Atomic {
				if rec, err := store.Get(t.Context(), idempotency.NewKey("acme", t.Name())); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("record after the failure: %s (err %v), want none", rec.Status, err)
				}
			}
		})
	}
}

// unresolved is the Resolver of an External route whose records these tests
// never reconcile: it fails the test when asked.
func unresolved(t *testing.T) idempotency.Resolver {
	return idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
		t.Error("the resolver was asked; no record here is reconciled")
		return idempotency.Resolution{}, errors.New("unresolved")
	})
}
