package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/problem"
)

// errSoldOut is a business answer of the tests' effects.
var errSoldOut = problem.New(http.StatusConflict, "sold_out", "Sold out", "Nothing is left.")

// stock is a memory effect that takes n from the counter item "stock", and
// is rejected with errSoldOut when fewer are left.
func take(n int) memory.Effect {
	return memory.Effect{Table: "counters", Key: "stock", Apply: func(cur any, ok bool) (any, bool, error) {
		left, _ := cur.(int)
		if !ok || left < n {
			return nil, false, errSoldOut
		}
		return left - n, true, nil
	}}
}

// give is the effect that gives n back to "stock".
func give(n int) memory.Effect {
	return memory.Effect{Table: "counters", Key: "stock", Apply: func(cur any, ok bool) (any, bool, error) {
		left, _ := cur.(int)
		return left + n, true, nil
	}}
}

type effectEnv struct {
	store *memory.Store
	mw    *idempotency.Middleware
	calls []idempotency.Observation
}

func newEffectEnv(t *testing.T, stock int) *effectEnv {
	t.Helper()
	e := &effectEnv{store: memory.New()}
	if err := e.store.Commit(t.Context(), idempotency.Record{
		Key: idempotency.NewKey("seed", "seed"), Status: idempotency.StatusCompleted, Fingerprint: "seed",
		ExpiresAt: time.Now().Add(time.Hour), Response: &idempotency.Response{Status: 200},
	}, []idempotency.Effect{memory.Insert("counters", "stock", stock)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.New(idempotency.Config{Store: e.store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	e.mw = mw
	return e
}

// do sends body under key to h and returns the answer and the observation.
func (e *effectEnv) do(t *testing.T, h http.Handler, key, body string) (*httptest.ResponseRecorder, idempotency.Observation) {
	t.Helper()
	var obs idempotency.Observation
	r := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(body))
	r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, obs
}

func (e *effectEnv) stock(t *testing.T) int {
	t.Helper()
	n, _ := e.store.Items("counters")["stock"].(int)
	return n
}

func nothingFound() idempotency.Resolver {
	return idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
		return idempotency.Resolution{}, nil
	})
}

// TestAtomicRejection: an Atomic commit whose effect is rejected with a 4xx
// stores that answer (a second write) and replays it (one); one that is
// rejected with a 5xx stores nothing.
func TestAtomicRejection(t *testing.T) {
	e := newEffectEnv(t, 2)
	h := e.mw.Atomic("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(take(3))
		w.WriteHeader(http.StatusCreated)
	}))
	first, obs := e.do(t, h, "k", `{"n":3}`)
	if first.Code != http.StatusConflict || !strings.Contains(first.Body.String(), `"code":"sold_out"`) {
		t.Fatalf("first = %d %s, want 409 sold_out", first.Code, first.Body)
	}
	if obs.Outcome != idempotency.OutcomeRefused || obs.StoreCalls != 2 {
		t.Errorf("first: outcome %s after %d store calls, want refused after 2", obs.Outcome, obs.StoreCalls)
	}
	again, obs := e.do(t, h, "k", `{"n":3}`)
	if again.Code != first.Code || again.Body.String() != first.Body.String() || again.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("retry = %d %s (replayed %q), want the stored answer replayed", again.Code, again.Body, again.Header().Get(idempotency.ReplayedHeader))
	}
	if obs.Outcome != idempotency.OutcomeReplayed || obs.StoreCalls != 1 {
		t.Errorf("retry: outcome %s after %d store calls, want replayed after 1", obs.Outcome, obs.StoreCalls)
	}
	if got := e.stock(t); got != 2 {
		t.Errorf("stock = %d, want 2 (nothing taken)", got)
	}

	// A rejection without a business answer is a 500, not stored.
	broken := e.mw.Atomic("POST /v1/broken", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(memory.Insert("counters", "stock", 1)) // exists: an internal error
		w.WriteHeader(http.StatusCreated)
	}))
	w, _ := e.do(t, broken, "b", `{}`)
	if w.Code != http.StatusInternalServerError {
		t.Fatalf("colliding insert = %d %s, want 500", w.Code, w.Body)
	}
	if _, err := e.store.Get(t.Context(), idempotency.NewKey("acme", "b")); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record after a 500 = %v, want none", err)
	}
}

// TestAtomicServerError: an Atomic handler that answers 5xx after Begin has
// done nothing (its effects are only written with the commit), so nothing
// is written: the client gets the 5xx, no record and none of the effects
// are stored, and a retry executes again, its answer and effects committed
// then, on each store.
func TestAtomicServerError(t *testing.T) {
	eachStore(t, func(t *testing.T, s testStore) {
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
			t.Run(fmt.Sprint(status), func(t *testing.T) {
				mw, err := idempotency.New(idempotency.Config{Store: s, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
				if err != nil {
					t.Fatal(err)
				}
				item := func(run int) string { return fmt.Sprintf("%s-%d", t.Name(), run) }
				runs := 0
				h := mw.Atomic("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					call, ok := idempotency.Begin(w, r)
					if !ok {
						return
					}
					runs++
					call.AddEffect(s.insert(item(runs)))
					if runs == 1 {
						w.WriteHeader(status)
						fmt.Fprint(w, `{"error":"down"}`)
						return
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, `{"run":%d}`, runs)
				}))
				send := func() (*httptest.ResponseRecorder, idempotency.Observation) {
					return sendObserved(h, "/v1/orders", t.Name())
				}
				key := idempotency.NewKey("acme", t.Name())

				first, obs := send()
				if first.Code != status || first.Body.String() != `{"error":"down"}` || obs.Outcome != idempotency.OutcomeReleased {
					t.Errorf("first = %d %s (%s), want the handler's %d sent as it is (released)", first.Code, first.Body, obs.Outcome, status)
				}
				if rec, err := s.Get(t.Context(), key); !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("record after a %d: %s %s (err %v), want none", status, rec.Status, answerOf(rec), err)
				}
				if s.inserted(t, item(1)) {
					t.Errorf("the effect of the run that answered %d is written, want nothing committed", status)
				}

				again, obs := send()
				if again.Code != http.StatusCreated || again.Body.String() != `{"run":2}` || obs.Outcome != idempotency.OutcomeCreated ||
					again.Header().Get(idempotency.ReplayedHeader) != "" {
					t.Errorf("retry = %d %s (%s, replayed %q), want 201 {\"run\":2} executed anew", again.Code, again.Body, obs.Outcome, again.Header().Get(idempotency.ReplayedHeader))
				}
				if runs != 2 {
					t.Errorf("handler ran %d times, want 2", runs)
				}
				if !s.inserted(t, item(2)) || s.inserted(t, item(1)) {
					t.Errorf("effects written: first run's %v, retry's %v; want only the retry's", s.inserted(t, item(1)), s.inserted(t, item(2)))
				}
				if rec, err := s.Get(t.Context(), key); err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil || rec.Response.Status != http.StatusCreated {
					t.Errorf("record after the retry: %s %s (err %v), want COMPLETED with the 201", rec.Status, answerOf(rec), err)
				}
			})
		}
	})
}

// TestHolds: External holds are taken with the reservation, kept by a
// completion, given back by a release, and a rejected hold is a stored
// business answer.
func TestHolds(t *testing.T) {
	e := newEffectEnv(t, 5)
	var status int // the handler's answer
	h := e.mw.External("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscanf(r.URL.Query().Get("n"), "%d", &n)
		call, ok := idempotency.Begin(w, r, take(n))
		if !ok {
			return
		}
		call.AddReleaseEffect(give(n))
		w.WriteHeader(status)
	}), nothingFound())
	send := func(key string, n int) (*httptest.ResponseRecorder, idempotency.Observation) {
		var obs idempotency.Observation
		r := httptest.NewRequest("POST", fmt.Sprintf("/v1/orders?n=%d", n), strings.NewReader(fmt.Sprintf(`{"n":%d}`, n)))
		r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
		r.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, obs
	}

	status = http.StatusCreated
	if w, obs := send("a", 2); w.Code != http.StatusCreated || obs.StoreCalls != 2 {
		t.Fatalf("take 2 = %d after %d store calls, want 201 after 2 (reserve with the hold, complete)", w.Code, obs.StoreCalls)
	}
	if got := e.stock(t); got != 3 {
		t.Errorf("stock after a completed take of 2 = %d, want 3", got)
	}

	status = http.StatusServiceUnavailable
	if w, _ := send("b", 3); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("released take = %d, want 503", w.Code)
	}
	if got := e.stock(t); got != 3 {
		t.Errorf("stock after a released take of 3 = %d, want 3 (given back)", got)
	}
	if _, err := e.store.Get(t.Context(), idempotency.NewKey("acme", "b")); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record after a release = %v, want none", err)
	}

	status = http.StatusCreated
	first, obs := send("c", 4)
	if first.Code != http.StatusConflict || obs.Outcome != idempotency.OutcomeRefused || obs.StoreCalls != 2 {
		t.Fatalf("take 4 of 3 = %d (%s after %d store calls), want a stored 409 after 2", first.Code, obs.Outcome, obs.StoreCalls)
	}
	again, obs := send("c", 4)
	if again.Code != http.StatusConflict || again.Body.String() != first.Body.String() || obs.Outcome != idempotency.OutcomeReplayed {
		t.Errorf("retry of the refused take = %d %s (%s), want the 409 replayed", again.Code, again.Body, obs.Outcome)
	}
	if got := e.stock(t); got != 3 {
		t.Errorf("stock after a refused take = %d, want 3", got)
	}
}

// TestLeasedRejection: in Leased mode a completion whose effect is rejected
// stores the business answer under the lease instead of the handler's.
func TestLeasedRejection(t *testing.T) {
	e := newEffectEnv(t, 1)
	h := e.mw.Leased("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(take(2))
		w.WriteHeader(http.StatusCreated)
	}))
	first, obs := e.do(t, h, "k", `{}`)
	if first.Code != http.StatusConflict || obs.Outcome != idempotency.OutcomeRefused || obs.StoreCalls != 3 {
		t.Fatalf("first = %d (%s after %d store calls), want a stored 409 after 3 (reserve, complete, complete the answer)", first.Code, obs.Outcome, obs.StoreCalls)
	}
	rec, err := e.store.Get(t.Context(), idempotency.NewKey("acme", "k"))
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.Response.Status != http.StatusConflict {
		t.Errorf("record = %+v, %v; want COMPLETED with the 409", rec, err)
	}
}

// TestWiring: misuse fails at start-up, not at the first request.
func TestWiring(t *testing.T) {
	mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("External without a resolver", func() { mw.External("POST /v1/a", h, nil) })
	mustPanic("External with a nil ResolverFunc", func() { mw.External("POST /v1/a2", h, idempotency.ResolverFunc(nil)) })
	mustPanic("Wrap(External)", func() { mw.Wrap(idempotency.External, "POST /v1/b", h) })
	mw.Atomic("POST /v1/c", h)
	mustPanic("a route wrapped twice", func() { mw.Leased("POST /v1/c", h) })
	mw.External("POST /v1/d", h, nothingFound())
	if got := mw.Resolvers(); len(got) != 1 || got["POST /v1/d"] == nil {
		t.Errorf("Resolvers() = %v, want POST /v1/d's", got)
	}
	if got := mw.Routes(); got["POST /v1/c"] != idempotency.Atomic || got["POST /v1/d"] != idempotency.External {
		t.Errorf("Routes() = %v", got)
	}
	if _, err := idempotency.New(idempotency.Config{}); err == nil || !strings.Contains(err.Error(), "Store") || !strings.Contains(err.Error(), "Tenant") {
		t.Errorf("New(Config{}) = %v, want an error naming Store and Tenant", err)
	}
	tenant := func(*http.Request) (string, bool) { return "acme", true }
	// A Store holding a nil pointer would panic at the first request.
	if _, err := idempotency.New(idempotency.Config{Store: (*memory.Store)(nil), Tenant: tenant}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New(Config{Store: (*memory.Store)(nil)}) = %v, want an error naming Store", err)
	}
	for _, tt := range []struct {
		retention, lease time.Duration
		wantErr          error
	}{
		{time.Minute, 2 * time.Minute, idempotency.ErrRetentionShort},
		{time.Second, 0, idempotency.ErrRetentionShort},    // the default lease
		{0, 25 * time.Hour, idempotency.ErrRetentionShort}, // the default retention
		{time.Minute, time.Minute, nil},
		{0, 0, nil},
	} {
		_, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: tenant, Retention: tt.retention, Lease: tt.lease})
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("New(Retention %v, Lease %v) = %v, want %v", tt.retention, tt.lease, err, tt.wantErr)
		}
	}
	for _, tt := range []struct {
		retention, redrive time.Duration
		wantErr            error
	}{
		{time.Minute, 2 * time.Minute, idempotency.ErrUnknownRedriveLong},
		{59 * time.Second, 0, idempotency.ErrUnknownRedriveLong}, // the default redrive, a minute
		{0, 25 * time.Hour, idempotency.ErrUnknownRedriveLong},   // the default retention
		{time.Minute, 0, nil}, // equal is enough
		{0, idempotency.DefaultRetention, nil},
		{2 * time.Hour, time.Hour, nil},
	} {
		_, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: tenant, Retention: tt.retention, Lease: time.Second, UnknownRedrive: tt.redrive})
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("New(Retention %v, UnknownRedrive %v) = %v, want %v", tt.retention, tt.redrive, err, tt.wantErr)
		}
		if err != nil && (errors.Is(err, idempotency.ErrRetentionShort) || !strings.Contains(err.Error(), "UnknownRedrive")) {
			t.Errorf("New(Retention %v, UnknownRedrive %v) = %v, want an error naming UnknownRedrive, not ErrRetentionShort", tt.retention, tt.redrive, err)
		}
	}
	for _, tt := range []struct {
		completion, lease time.Duration
		wantErr           error
	}{
		{time.Minute, time.Minute, idempotency.ErrCompletionTimeoutLong},
		{31 * time.Second, 0, idempotency.ErrCompletionTimeoutLong}, // the default lease
		{time.Second, 2 * time.Second, nil},
		{0, 5 * time.Second, nil}, // unset: half the lease (TestCompletionTimeoutDefault)
	} {
		_, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: tenant, CompletionTimeout: tt.completion, Lease: tt.lease})
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("New(CompletionTimeout %v, Lease %v) = %v, want %v", tt.completion, tt.lease, err, tt.wantErr)
		}
	}

	leased := mw.Leased("POST /v1/e", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idempotency.Begin(w, r, take(1))
	}))
	r := httptest.NewRequest("POST", "/v1/e", strings.NewReader(`{}`))
	r.Header.Set(idempotency.Header, "k")
	mustPanic("holds in Leased mode", func() { leased.ServeHTTP(httptest.NewRecorder(), r) })
}

// TestRoutes: a route that cannot name an endpoint, or names one wrapped
// already, panics when it is wrapped, saying which and why; none of the
// handlers is ever served.
func TestRoutes(t *testing.T) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a handler was served") })
	tests := []struct {
		name   string
		before []string                         // routes wrapped first
		wrap   func(mw *idempotency.Middleware) // what is checked
		want   string                           // in the panic; empty: no panic
	}{
		{name: "a route", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST /v1/notes", h) }},
		{name: "a route with a wildcard", wrap: func(mw *idempotency.Middleware) { mw.Leased("POST /v1/notes/{id}/copy", h) }},
		{name: "a route without a method", wrap: func(mw *idempotency.Middleware) { mw.Atomic("/v1/notes", h) }},
		{name: "a more specific route beside a wildcard", before: []string{"POST /v1/notes/{id}"},
			wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST /v1/notes/new", h) }},
		{name: "empty", wrap: func(mw *idempotency.Middleware) { mw.Atomic("", h) },
			want: "idempotency: the route is empty"},
		{name: "two spaces", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST  /v1/notes", h) },
			want: `route "POST  /v1/notes": write it with single spaces`},
		{name: "a trailing blank", wrap: func(mw *idempotency.Middleware) { mw.Leased("POST /v1/notes ", h) },
			want: `route "POST /v1/notes ": write it with single spaces`},
		{name: "a tab", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST\t/v1/notes", h) },
			want: `route "POST\t/v1/notes": write it with single spaces`},
		{name: "no slash (a host to ServeMux)", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST v1/notes", h) },
			want: `route "POST v1/notes": want "METHOD /path"`},
		{name: "a method alone", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST", h) },
			want: `route "POST": want "METHOD /path"`},
		{name: "three words", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST /v1/notes now", h) },
			want: `route "POST /v1/notes now": want "METHOD /path"`},
		{name: "not a pattern", wrap: func(mw *idempotency.Middleware) { mw.External("POST /v1/notes/{id", h, nothingFound()) },
			want: `route "POST /v1/notes/{id": parsing`},
		{name: "wrapped twice", before: []string{"POST /v1/notes"}, wrap: func(mw *idempotency.Middleware) { mw.Leased("POST /v1/notes", h) },
			want: `route "POST /v1/notes" is wrapped twice`},
		{name: "wrapped twice, External", before: []string{"POST /v1/notes"}, wrap: func(mw *idempotency.Middleware) { mw.External("POST /v1/notes", h, nothingFound()) },
			want: `route "POST /v1/notes" is wrapped twice`},
		{name: "the same requests under another wildcard name", before: []string{"POST /v1/notes/{id}"},
			wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST /v1/notes/{note}", h) },
			want: `route "POST /v1/notes/{note}": conflicts with a route wrapped before: POST /v1/notes/{note} matches the same requests as POST /v1/notes/{id}`},
		{name: "a nil handler", wrap: func(mw *idempotency.Middleware) { mw.Atomic("POST /v1/notes", nil) },
			want: `route "POST /v1/notes": the handler is nil`},
		{name: "a nil HandlerFunc", wrap: func(mw *idempotency.Middleware) { mw.Leased("POST /v1/notes", http.HandlerFunc(nil)) },
			want: `route "POST /v1/notes": the handler is nil`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tt.before {
				mw.Atomic(r, h)
			}
			got := func() (msg string) {
				defer func() {
					if v := recover(); v != nil {
						msg = fmt.Sprint(v)
					}
				}()
				tt.wrap(mw)
				return ""
			}()
			switch {
			case tt.want == "" && got != "":
				t.Errorf("wrapping panicked with %q, want no panic", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("wrapping panicked with %q, want %q", got, tt.want)
			}
			if routes := mw.Routes(); tt.want != "" && len(routes) != len(tt.before) {
				t.Errorf("Routes() = %v after the refused route, want only %v", routes, tt.before)
			}
		})
	}
}

// TestExternalCompletionRejected: in External mode the call out has
// happened when the completion's effects are rejected, so the rejection's
// business answer (a 4xx about the effect) is not this request's outcome:
// the answer is 500 internal_error, nothing is stored, and the reservation
// stays for reconciliation.
func TestExternalCompletionRejected(t *testing.T) {
	e := newEffectEnv(t, 1)
	h := e.mw.External("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(take(2)) // the call out happened; its local effect cannot be written
		w.WriteHeader(http.StatusCreated)
	}), nothingFound())
	w, obs := e.do(t, h, "k", `{}`)
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"code":"internal_error"`) {
		t.Errorf("rejected completion = %d %s, want 500 internal_error", w.Code, w.Body)
	}
	if obs.Outcome != idempotency.OutcomeStoreError || !strings.Contains(obs.Err, "sold_out") {
		t.Errorf("observation: outcome %s, err %q; want store_error naming the rejection", obs.Outcome, obs.Err)
	}
	rec, err := e.store.Get(t.Context(), idempotency.NewKey("acme", "k"))
	if err != nil || rec.Status != idempotency.StatusInProgress || rec.Response != nil {
		t.Errorf("record = %s %+v, %v; want the reservation, IN_PROGRESS, nothing stored", rec.Status, rec.Response, err)
	}
	if got := e.stock(t); got != 1 {
		t.Errorf("stock = %d, want 1 (nothing taken)", got)
	}
}
