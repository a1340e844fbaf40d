package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
)

// provider is an idempotent-by-key external system: one charge per key.
type provider struct {
	mu      sync.Mutex
	charges map[string]string // forward key -> charge id
	calls   int
	fail    error // the next call fails with it (and charges nothing)
}

func (p *provider) charge(key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if err := p.fail; err != nil {
		p.fail = nil
		return "", err
	}
	if id, ok := p.charges[key]; ok {
		return id, nil
	}
	id := fmt.Sprintf("ch_%d", len(p.charges)+1)
	p.charges[key] = id
	return id, nil
}

var errUnavailable = errors.New("provider unavailable")

// orders is a three-point flow: the order is created with the reservation
// ("created"), charged ("charged"), and finished with a receipt.
type orders struct {
	store    *memory.Store
	provider *provider
	clock    time.Time
	crashAt  string // a fault point to crash at, once
	mw       *idempotency.Middleware
	h        http.Handler
}

type crash struct{ point string }

func newOrders(t *testing.T) *orders {
	t.Helper()
	o := &orders{store: memory.New(), provider: &provider{charges: map[string]string{}}, clock: time.Unix(1_800_000_000, 0)}
	mw, err := idempotency.New(idempotency.Config{
		Store:  o.store,
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
		Lease:  10 * time.Second,
		Now:    func() time.Time { return o.clock },
		Hook: func(_ context.Context, point string) {
			if point == o.crashAt {
				o.crashAt = ""
				panic(crash{point})
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	o.mw = mw
	o.h = mw.External("POST /v1/orders", http.HandlerFunc(o.create), idempotency.ResolverFunc(o.resolve))
	return o
}

func (o *orders) create(w http.ResponseWriter, r *http.Request) {
	id := fmt.Sprintf("ord_%d", time.Now().UnixNano())
	call, ok := idempotency.BeginAt(w, r, "created", map[string]string{"order": id}, memory.Insert("orders", id, "created"))
	if !ok {
		return
	}
	resp, effects, err := o.run(r.Context(), call.Steps())
	var conflict *idempotency.ConflictError
	switch {
	case errors.As(err, &conflict):
		return // the lease is lost: the middleware answers from the store
	case errors.Is(err, errUnavailable):
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case err != nil:
		call.Unknown()
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	for _, e := range effects {
		call.AddEffect(e)
	}
	call.Finish("finished")
	w.Header().Set("Content-Type", resp.Header["Content-Type"])
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// run goes through the phases after the steps' point: the handler's and the
// resolver's one path.
func (o *orders) run(ctx context.Context, s *idempotency.Steps) (idempotency.Response, []idempotency.Effect, error) {
	order := s.Data()["order"]
	if s.Point() == "created" {
		ch, err := o.provider.charge(s.ForwardKey("charged"))
		if err != nil {
			return idempotency.Response{}, nil, err
		}
		if err := s.Advance(ctx, "charged", map[string]string{"charge": ch}, memory.Effect{Table: "orders", Key: order,
			Apply: func(any, bool) (any, bool, error) { return "paid", true, nil }}); err != nil {
			return idempotency.Response{}, nil, err
		}
	}
	body, _ := json.Marshal(map[string]string{"id": order, "charge": s.Data()["charge"]})
	return idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: body},
		[]idempotency.Effect{memory.Insert("receipts", order, "queued")}, nil
}

func (o *orders) resolve(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
	resp, effects, err := o.run(ctx, idempotency.ResumeSteps(o.store, rec, func() time.Time { return o.clock }))
	if err != nil {
		return idempotency.Resolution{}, err
	}
	return idempotency.Resolution{Response: &resp, Effects: effects}, nil
}

// send posts one order request; a crash is recovered and reported as 0.
func (o *orders) send(t *testing.T, key string) (w *httptest.ResponseRecorder) {
	t.Helper()
	w = httptest.NewRecorder()
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(crash); !ok {
				panic(v)
			}
			w = httptest.NewRecorder()
			w.Code = 0
		}
	}()
	r := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(`{"amount":100}`))
	r.Header.Set(idempotency.Header, key)
	o.h.ServeHTTP(w, r)
	return w
}

// effects checks one order, one charge and receipts as wanted.
func (o *orders) effects(t *testing.T, receipts int) {
	t.Helper()
	if n := len(o.store.Items("orders")); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if n := len(o.provider.charges); n != 1 {
		t.Errorf("%d charges at the provider, want 1", n)
	}
	if n := len(o.store.Items("receipts")); n != receipts {
		t.Errorf("%d receipts, want %d", n, receipts)
	}
}

func TestStepsHappyPath(t *testing.T) {
	o := newOrders(t)
	first := o.send(t, "k")
	if first.Code != http.StatusCreated {
		t.Fatalf("first = %d %s, want 201", first.Code, first.Body)
	}
	again := o.send(t, "k")
	if again.Code != http.StatusCreated || again.Body.String() != first.Body.String() || again.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("retry = %d %s, want the 201 replayed", again.Code, again.Body)
	}
	o.effects(t, 1)
	rec, err := o.store.Get(t.Context(), idempotency.NewKey("acme", "k"))
	if err != nil || rec.Status != idempotency.StatusCompleted || rec.Point != "finished" || rec.Data["charge"] != "ch_1" {
		t.Errorf("record = %+v, %v; want COMPLETED at finished with the charge recorded", rec, err)
	}
}

// TestStepsCrashes: a crash after each point leaves the record there; a
// retry within the lease gets 409, one after the lease takes over and
// resumes, repeating no committed phase.
func TestStepsCrashes(t *testing.T) {
	for _, tt := range []struct {
		point     string
		wantCalls int // provider calls in all
	}{
		{"after-created", 1},
		{"after-charged", 1},
		{"after-finished", 1},
	} {
		t.Run(tt.point, func(t *testing.T) {
			o := newOrders(t)
			o.crashAt = tt.point
			if w := o.send(t, "k"); w.Code != 0 {
				t.Fatalf("first = %d, want a crash", w.Code)
			}
			w := o.send(t, "k")
			if tt.point == "after-finished" {
				if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Fatalf("retry after a crash after finishing = %d, want the 201 replayed", w.Code)
				}
			} else {
				if w.Code != http.StatusConflict {
					t.Fatalf("retry within the lease = %d %s, want 409", w.Code, w.Body)
				}
				o.clock = o.clock.Add(11 * time.Second)
				if w := o.send(t, "k"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" {
					t.Fatalf("retry after the lease = %d %s, want the resumed 201", w.Code, w.Body)
				}
			}
			o.effects(t, 1)
			if o.provider.calls != tt.wantCalls {
				t.Errorf("provider calls = %d, want %d", o.provider.calls, tt.wantCalls)
			}
		})
	}
}

// TestStepsUnavailable: a provider that provably did nothing gives the lease
// up at the point reached; the retry resumes at once with the same order.
func TestStepsUnavailable(t *testing.T) {
	o := newOrders(t)
	o.provider.fail = errUnavailable
	if w := o.send(t, "k"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("first = %d, want 503", w.Code)
	}
	if w := o.send(t, "k"); w.Code != http.StatusCreated {
		t.Fatalf("immediate retry = %d %s, want the resumed 201", w.Code, w.Body)
	}
	o.effects(t, 1)
}

// TestStepsUnknown: an outcome the handler cannot know keeps the lease; the
// retry after it calls the provider again under the same forward key, which
// answers with the same charge.
func TestStepsUnknown(t *testing.T) {
	o := newOrders(t)
	o.provider.fail = errors.New("timeout")
	if w := o.send(t, "k"); w.Code != http.StatusGatewayTimeout {
		t.Fatalf("first = %d, want 504", w.Code)
	}
	if w := o.send(t, "k"); w.Code != http.StatusConflict {
		t.Fatalf("retry within the lease = %d, want 409", w.Code)
	}
	o.clock = o.clock.Add(11 * time.Second)
	if w := o.send(t, "k"); w.Code != http.StatusCreated {
		t.Fatalf("retry after the lease = %d %s, want 201", w.Code, w.Body)
	}
	o.effects(t, 1)
}

// TestStepsResolver: the reconciler's Resolver resumes an abandoned request
// (handed to it as UNKNOWN) from its point, through the same path.
func TestStepsResolver(t *testing.T) {
	o := newOrders(t)
	o.crashAt = "after-charged"
	o.send(t, "k")
	key := idempotency.NewKey("acme", "k")
	rec, err := o.store.Get(t.Context(), key)
	if err != nil || rec.Point != "charged" {
		t.Fatalf("record = %+v, %v; want IN_PROGRESS at charged", rec, err)
	}
	if err := o.store.MarkUnknown(t.Context(), key, rec.LeaseToken, "unknown-lease", o.clock.Add(time.Hour), o.clock); err != nil {
		t.Fatal(err)
	}
	unknown, _ := o.store.Get(t.Context(), key)
	res, err := o.mw.Resolvers()["POST /v1/orders"].Resolve(t.Context(), unknown)
	if err != nil || res.Response == nil || res.Response.Status != http.StatusCreated {
		t.Fatalf("Resolve() = %+v, %v; want the 201", res, err)
	}
	done := unknown
	done.Status, done.Response = idempotency.StatusCompleted, res.Response
	if err := o.store.Complete(t.Context(), done, unknown.LeaseToken, res.Effects); err != nil {
		t.Fatal(err)
	}
	if w := o.send(t, "k"); w.Code != http.StatusCreated || w.Body.String() != string(res.Response.Body) {
		t.Errorf("retry after reconciliation = %d %s, want the resolved 201 %s", w.Code, w.Body, res.Response.Body)
	}
	o.effects(t, 1)
	if o.provider.calls != 1 {
		t.Errorf("provider calls = %d, want 1 (the charge phase was committed)", o.provider.calls)
	}
}

// TestStepsFencing: a zombie whose lease was taken over cannot advance.
func TestStepsFencing(t *testing.T) {
	o := newOrders(t)
	var zombie *idempotency.Steps
	h := o.mw.External("POST /v1/zombies", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.BeginAt(w, r, "created", map[string]string{"order": "ord_z"})
		if !ok {
			return
		}
		if zombie == nil {
			zombie = call.Steps()
			w.WriteHeader(http.StatusGatewayTimeout)
			call.Unknown()
			return
		}
		w.WriteHeader(http.StatusCreated)
	}), idempotency.ResolverFunc(o.resolve))
	send := func() int {
		r := httptest.NewRequest("POST", "/v1/zombies", strings.NewReader(`{}`))
		r.Header.Set(idempotency.Header, "z")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	send()
	o.clock = o.clock.Add(11 * time.Second)
	if got := send(); got != http.StatusCreated {
		t.Fatalf("takeover = %d, want 201", got)
	}
	err := zombie.Advance(t.Context(), "charged", nil)
	var conflict *idempotency.ConflictError
	if !errors.As(err, &conflict) {
		t.Errorf("zombie Advance = %v, want a *ConflictError", err)
	}
}

// TestStepsLeaseLostAnswersFromStore: a handler that stops because a phase
// found its lease lost (as Steps.Advance says it must) gets the answer the
// store's state calls for, and nothing of its own is stored: not even when
// the record is gone (deleted by TTL while the handler overran its lease),
// where a completion would have committed an answer it never gave.
func TestStepsLeaseLostAnswersFromStore(t *testing.T) {
	tests := []struct {
		name       string
		meanwhile  func(t *testing.T, o *orders, rec idempotency.Record) // what happens to the record while the handler runs
		wantStatus int
		wantRecord idempotency.Status // "" for none
	}{
		{
			name: "record gone",
			meanwhile: func(t *testing.T, o *orders, rec idempotency.Record) {
				if err := o.store.Release(t.Context(), rec.Key, rec.LeaseToken, nil); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: http.StatusConflict,
		},
		{
			name: "finished by a newer owner",
			meanwhile: func(t *testing.T, o *orders, rec idempotency.Record) {
				done := rec
				done.Status, done.Response = idempotency.StatusCompleted, &idempotency.Response{Status: http.StatusCreated, Body: []byte(`{"id":"ord_other"}`)}
				if err := o.store.Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: http.StatusCreated,
			wantRecord: idempotency.StatusCompleted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOrders(t)
			h := o.mw.External("POST /v1/lost", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.BeginAt(w, r, "created", map[string]string{"order": "ord_1"})
				if !ok {
					return
				}
				tt.meanwhile(t, o, call.Record())
				err := call.Steps().Advance(r.Context(), "charged", nil)
				var conflict *idempotency.ConflictError
				if !errors.As(err, &conflict) {
					t.Errorf("Advance = %v, want a *ConflictError", err)
				}
			}), idempotency.ResolverFunc(o.resolve))
			r := httptest.NewRequest("POST", "/v1/lost", strings.NewReader(`{}`))
			r.Header.Set(idempotency.Header, "k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.wantStatus {
				t.Errorf("answer = %d %s, want %d", w.Code, w.Body, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusConflict && w.Header().Get("Retry-After") == "" {
				t.Errorf("409 without Retry-After")
			}
			rec, err := o.store.Get(t.Context(), idempotency.NewKey("acme", "k"))
			switch {
			case tt.wantRecord == "" && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record = %s %+v, %v; want none (nothing stored)", rec.Status, rec.Response, err)
			case tt.wantRecord != "" && (err != nil || rec.Status != tt.wantRecord || rec.Response.Status != tt.wantStatus):
				t.Errorf("record = %s %+v, %v; want %s with the newer owner's answer", rec.Status, rec.Response, err, tt.wantRecord)
			}
		})
	}
}
