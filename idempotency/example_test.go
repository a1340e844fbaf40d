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
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/idempotency/recovery"
)

// tenantFromHeader stands in for the API Gateway authorizer's context
// (idempotency/apigw.Tenant in a Lambda): the tenant must never come from
// anything the caller controls.
func tenantFromHeader(r *http.Request) (string, bool) {
	t := r.Header.Get("X-Tenant")
	return t, t != ""
}

func post(h http.Handler, tenant, key, body string) *httptest.ResponseRecorder {
	return postTo(h, "/v1/notes", tenant, key, body)
}

func postTo(h http.Handler, path, tenant, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", path, strings.NewReader(body))
	r.Header.Set("X-Tenant", tenant)
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// An Atomic endpoint: the note is written in the same transaction as the
// stored answer, so a retry replays the answer and writes nothing.
func ExampleMiddleware_Atomic() {
	store := memory.New() // dynamo.New(client, table) in production
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
	if err != nil {
		panic(err)
	}
	notes := 0
	h := mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Validate first: an answer written before Begin is not stored.
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return // a replay, 409, 422 or 503 is already decided
		}
		notes++
		id := fmt.Sprintf("note_%d", notes)
		call.AddEffect(memory.Insert("notes", id, id)) // dynamo.Insert(table, "pk", item) with DynamoDB
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	}))

	first := post(h, "acme", "key-1", `{"text":"hello"}`)
	retry := post(h, "acme", "key-1", `{ "text": "hello" }`) // the same JSON, spelled otherwise
	other := post(h, "acme", "key-1", `{"text":"bye"}`)
	fmt.Println(first.Code, first.Body.String())
	fmt.Println(retry.Code, retry.Body.String(), retry.Header().Get(idempotency.ReplayedHeader))
	fmt.Println(other.Code, problem.For(idempotency.ErrKeyReused).Code)
	fmt.Println(len(store.Items("notes")), "note written")
	// Output:
	// 201 {"id":"note_1"}
	// 201 {"id":"note_1"} true
	// 422 idempotency_key_reused
	// 1 note written
}

// A Leased endpoint: Begin reserves the key under a lease before the
// handler does its work, so a duplicate sent meanwhile gets 409 rather than
// running too; a 5xx releases the key (nothing was done), so a retry runs
// again, and the answer is stored with the effects when the handler ends.
func ExampleMiddleware_Leased() {
	store := memory.New()
	now := func() time.Time { return time.Unix(1_800_000_000, 0) } // a fixed clock, for the Retry-After
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader, Now: now})
	if err != nil {
		panic(err)
	}
	var h http.Handler
	failing, duplicate := true, ""
	h = mw.Leased("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		if failing { // a dependency is down: nothing done
			failing = false
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		// The same request, sent again while this one holds the lease.
		dup := post(h, "acme", "key-1", `{"text":"hello"}`)
		duplicate = fmt.Sprint(dup.Code, " Retry-After: ", dup.Header().Get("Retry-After"))
		call.AddEffect(memory.Insert("notes", "note_1", "hello"))
		w.WriteHeader(http.StatusCreated)
	}))
	fmt.Println(post(h, "acme", "key-1", `{"text":"hello"}`).Code)
	fmt.Println(post(h, "acme", "key-1", `{"text":"hello"}`).Code, "(duplicate meanwhile:", duplicate+")")
	fmt.Println(post(h, "acme", "key-1", `{"text":"hello"}`).Header().Get(idempotency.ReplayedHeader))
	fmt.Println(len(store.Items("notes")), "note written")
	// Output:
	// 503
	// 201 (duplicate meanwhile: 409 Retry-After: 30)
	// true
	// 1 note written
}

// An External endpoint calls another system with the request's forward key
// and registers the Resolver the reconciler uses when the outcome is unknown.
// ExampleMiddleware_External_unknownOutcome shows a call out with its
// timeout, the classification of its errors, Call.Unknown and the
// reconciliation.
func ExampleMiddleware_External() {
	mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: tenantFromHeader})
	if err != nil {
		panic(err)
	}
	sent := map[string]string{} // the other system, idempotent by key
	send := func(key string) string {
		if id, ok := sent[key]; ok {
			return id
		}
		sent[key] = fmt.Sprintf("msg_%d", len(sent)+1)
		return sent[key]
	}
	answer := func(id string) idempotency.Response {
		return idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"},
			Body: []byte(fmt.Sprintf(`{"message":%q}`, id))}
	}
	resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		id, ok := sent[rec.ForwardKey()]
		if !ok {
			return idempotency.Resolution{}, nil // nothing happened: the key is released
		}
		resp := answer(id) // the same bytes the handler sends
		return idempotency.Resolution{Response: &resp}, nil
	})
	h := mw.External("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		resp := answer(send(call.ForwardKey()))
		w.Header().Set("Content-Type", resp.Header["Content-Type"])
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	}), resolver)

	fmt.Println(post(h, "acme", "k", `{"to":"bob"}`).Body.String())
	fmt.Println(post(h, "acme", "k", `{"to":"bob"}`).Body.String())
	fmt.Println(len(sent), "message sent;", len(mw.Resolvers()), "route to reconcile")
	// Output:
	// {"message":"msg_1"}
	// {"message":"msg_1"}
	// 1 message sent; 1 route to reconcile
}

// refundRequest is the refund endpoint's request body.
type refundRequest struct {
	Payment string `json:"payment"`
	Amount  int64  `json:"amount"`
}

// refundAnswer is the refund endpoint's answer for a refund the provider
// made. The handler writes it, and the Resolver rebuilds it from the record
// (rec.Request, the request's body) and the provider's refund ID: one
// function, so that a reconciled answer is byte for byte the one the
// handler would have written.
func refundAnswer(req refundRequest, refundID string) idempotency.Response {
	body, _ := json.Marshal(struct {
		ID      string `json:"id"`
		Payment string `json:"payment"`
		Amount  int64  `json:"amount"`
	}{refundID, req.Payment, req.Amount})
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/refunds/" + refundID},
		Body:   body,
	}
}

// errProviderUnavailable is the provider's definite refusal: it answered
// 503 and says that it did nothing.
var errProviderUnavailable = errors.New("provider: 503 service unavailable, nothing refunded")

// refundProvider stands in for another system's refund API, idempotent by
// key (the same key is the same refund), as a payment provider's is.
type refundProvider struct {
	mu      sync.Mutex
	refunds map[string]string // idempotency key -> refund ID
	next    []string          // what the next calls do: "ok", "unavailable" or "hang"
}

// Refund refunds amount under key. A "hang" refunds, then never answers:
// the caller's timeout ends the call, as a lost response or a dropped
// connection would.
func (p *refundProvider) Refund(ctx context.Context, key string, amount int64) (string, error) {
	p.mu.Lock()
	do := p.next[0]
	p.next = p.next[1:]
	if do == "unavailable" {
		p.mu.Unlock()
		return "", errProviderUnavailable
	}
	id, ok := p.refunds[key]
	if !ok {
		id = fmt.Sprintf("re_%d", len(p.refunds)+1)
		p.refunds[key] = id
	}
	p.mu.Unlock()
	if do == "hang" {
		<-ctx.Done()
		return "", fmt.Errorf("provider: refund: %w", ctx.Err())
	}
	return id, nil
}

// Lookup returns the refund made under key, if any.
func (p *refundProvider) Lookup(_ context.Context, key string) (string, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.refunds[key]
	return id, ok, nil
}

// An External endpoint calling a provider, each outcome classified. The
// call has its own timeout, shorter than the function's (a few seconds in
// production). A definite answer is answered: a success; a refusal that
// says nothing was done (here a 503) is answered 5xx, which is not stored,
// so the key is released and a retry calls the provider again. An
// ambiguous one (the timeout, a transport error, a 500 or 502/504 from the
// provider: the refund may have been made) is declared with Call.Unknown:
// the record goes UNKNOWN and retries get 409 until the reconciler
// (idempotency/recovery) asks the route's Resolver. The Resolver looks the
// refund up by rec.ForwardKey(), the key the handler sent, decodes
// rec.Request, the request's body, and rebuilds the answer with the
// handler's own function; the reconciler stores it and retries replay it.
// (A refusal that is the request's final answer, such as a 4xx "amount
// exceeds the payment", is answered 4xx and stored like any answer after
// Begin.)
func ExampleMiddleware_External_unknownOutcome() {
	store := memory.New() // dynamo.New(client, table) in production
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
	if err != nil {
		panic(err)
	}
	p := &refundProvider{refunds: map[string]string{}}
	resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		id, found, err := p.Lookup(ctx, rec.ForwardKey())
		if err != nil {
			return idempotency.Resolution{}, err // the provider cannot tell now: the reconciler retries
		}
		if !found {
			return idempotency.Resolution{}, nil // nothing refunded: the key is released
		}
		var req refundRequest
		if err := json.Unmarshal(rec.Request, &req); err != nil {
			return idempotency.Resolution{}, fmt.Errorf("%w: decode the request: %v", idempotency.ErrUnresolvable, err)
		}
		resp := refundAnswer(req, id)
		return idempotency.Resolution{Response: &resp}, nil
	})
	h := mw.External("POST /v1/refunds", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req refundRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Amount <= 0 {
			problem.Write(w, r, problem.Invalid("amount", "must be positive")) // before Begin: not stored
			return
		}
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
		defer cancel()
		id, err := p.Refund(ctx, call.ForwardKey(), req.Amount)
		switch {
		case err == nil:
			resp := refundAnswer(req, id)
			resp.SetHeader(w.Header())
			w.WriteHeader(resp.Status)
			w.Write(resp.Body)
		case errors.Is(err, errProviderUnavailable):
			// Definite: nothing was refunded. The 5xx releases the key.
			problem.Write(w, r, problem.New(http.StatusServiceUnavailable, "provider_unavailable", "Provider unavailable", "Nothing was refunded; retry."))
		default:
			// Ambiguous: the refund may have been made.
			call.Unknown()
			problem.Write(w, r, problem.New(http.StatusGatewayTimeout, "provider_outcome_unknown", "Outcome unknown", "Retry later to learn the outcome."))
		}
	}), resolver)
	code := func(w interface{ Result() *http.Response }) string {
		var pb struct{ Code string }
		_ = json.NewDecoder(w.Result().Body).Decode(&pb)
		return pb.Code
	}

	// A success.
	p.next = []string{"ok"}
	fmt.Println(postTo(h, "/v1/refunds", "acme", "r-1", `{"payment":"pay_1","amount":500}`).Body.String())

	// A definite failure, then its retry: refunded once.
	p.next = []string{"unavailable", "ok"}
	fmt.Println(code(postTo(h, "/v1/refunds", "acme", "r-2", `{"payment":"pay_1","amount":200}`)))
	fmt.Println(postTo(h, "/v1/refunds", "acme", "r-2", `{"payment":"pay_1","amount":200}`).Body.String())

	// An ambiguous one: the provider refunded, its answer never came.
	p.next = []string{"hang"}
	w := postTo(h, "/v1/refunds", "acme", "r-3", `{"payment":"pay_1","amount":300}`)
	rec, _ := store.Get(context.Background(), idempotency.NewKey("acme", "r-3"))
	fmt.Println(w.Code, code(w), rec.Status)
	fmt.Println(postTo(h, "/v1/refunds", "acme", "r-3", `{"payment":"pay_1","amount":300}`).Code)

	// The reconciler (the recovery function, on the table's stream) resolves
	// the UNKNOWN record; the retry then gets the refund's answer.
	reconciler, err := recovery.NewReconciler(recovery.ReconcilerConfig{Store: store, Resolvers: mw.Resolvers(), Settle: time.Minute})
	if err != nil {
		panic(err)
	}
	if err := reconciler.Reconcile(context.Background(), nil, rec); err != nil {
		panic(err)
	}
	replay := postTo(h, "/v1/refunds", "acme", "r-3", `{"payment":"pay_1","amount":300}`)
	fmt.Println(replay.Code, replay.Body.String(), replay.Header().Get(idempotency.ReplayedHeader), replay.Header().Get("Location"))
	fmt.Println(len(p.refunds), "refunds at the provider")
	// Output:
	// {"id":"re_1","payment":"pay_1","amount":500}
	// provider_unavailable
	// {"id":"re_2","payment":"pay_1","amount":200}
	// 504 provider_outcome_unknown UNKNOWN
	// 409
	// 201 {"id":"re_3","payment":"pay_1","amount":300} true /v1/refunds/re_3
	// 3 refunds at the provider
}

// A business condition checked in the transaction that stores the answer: a
// rejected effect's 4xx is the key's final answer, replayed like any other.
func ExampleRejectedError() {
	store := memory.New()
	mw, _ := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
	errTaken := problem.New(http.StatusConflict, "name_taken", "Name taken", "That name is taken.")
	h := mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(memory.Effect{Table: "names", Key: "alice", Apply: func(_ any, exists bool) (any, bool, error) {
			if exists {
				return nil, false, errTaken // dynamo effects say this with Condition and Reject
			}
			return "alice", true, nil
		}})
		w.WriteHeader(http.StatusCreated)
	}))
	fmt.Println(post(h, "acme", "a", `{"name":"alice"}`).Code)
	second := post(h, "acme", "b", `{"name":"alice"}`)
	retry := post(h, "acme", "b", `{"name":"alice"}`)
	fmt.Println(second.Code, retry.Code, retry.Header().Get(idempotency.ReplayedHeader))
	// Output:
	// 201
	// 409 409 true
}

// A multi-step External endpoint: the order is written with the reservation
// (the recovery point "created"), then charged at another system under the
// phase's forward key ("charged"), then finished with the answer. The first
// attempt finds the other system down and answers 503 without declaring its
// outcome unknown: the record stays at "created" and the lease is given up,
// so the retry takes the request over there at once, without writing the
// order again, and charges under the same forward key. The Resolver runs
// the same phases when the reconciler hands it an abandoned request.
func ExampleBeginAt() {
	store := memory.New()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenantFromHeader})
	if err != nil {
		panic(err)
	}
	down := true
	charged := map[string]string{} // the other system, idempotent by key
	charge := func(key string) (string, error) {
		if down {
			down = false
			return "", fmt.Errorf("charge: unavailable")
		}
		if _, ok := charged[key]; !ok {
			charged[key] = fmt.Sprintf("ch_%d", len(charged)+1)
		}
		return charged[key], nil
	}
	// phases runs what follows s.Point() and returns the answer: the live
	// handler and the Resolver share it.
	phases := func(ctx context.Context, s *idempotency.Steps) (idempotency.Response, error) {
		if s.Point() == "created" {
			id, err := charge(s.ForwardKey("charged"))
			if err != nil {
				return idempotency.Response{}, err
			}
			if err := s.Advance(ctx, "charged", map[string]string{"charge": id}); err != nil {
				return idempotency.Response{}, err // a *ConflictError: another owner took the request over
			}
		}
		d := s.Data()
		body := fmt.Sprintf(`{"order":%q,"charge":%q}`, d["order"], d["charge"])
		return idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(body)}, nil
	}
	resolver := idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		s := idempotency.ResumeSteps(store, rec, nil)
		resp, err := phases(ctx, s)
		if err != nil {
			return idempotency.Resolution{}, err
		}
		return idempotency.Resolution{Response: &resp, Steps: s, FinalPoint: "finished"}, nil
	})
	orders := 0
	h := mw.External("POST /v1/orders", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idempotency.KeyOf(r)
		orders++
		id := fmt.Sprintf("ord_%d", orders) // drawn anew by every attempt; only the first is written
		call, ok := idempotency.BeginAt(w, r, "created", map[string]string{"order": id},
			memory.Insert("orders", key.Tenant+"#"+id, id))
		if !ok {
			return
		}
		resp, err := phases(r.Context(), call.Steps())
		var conflict *idempotency.ConflictError
		switch {
		case errors.As(err, &conflict):
			return // the middleware answers from the record's state
		case err != nil:
			problem.Write(w, r, problem.New(http.StatusServiceUnavailable, "unavailable", "Unavailable", "Retry later."))
			return
		}
		call.Finish("finished")
		resp.SetHeader(w.Header())
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	}), resolver)

	first := postTo(h, "/v1/orders", "acme", "order-1", `{"amount":100}`)
	rec, _ := store.Get(context.Background(), idempotency.NewKey("acme", "order-1"))
	fmt.Println(first.Code, rec.Status, rec.Point)
	retry := postTo(h, "/v1/orders", "acme", "order-1", `{"amount":100}`)
	fmt.Println(retry.Code, retry.Body.String())
	again := postTo(h, "/v1/orders", "acme", "order-1", `{"amount":100}`)
	fmt.Println(again.Code, again.Header().Get(idempotency.ReplayedHeader))
	rec, _ = store.Get(context.Background(), idempotency.NewKey("acme", "order-1"))
	fmt.Println(rec.Status, rec.Point, len(store.Items("orders")), "order,", len(charged), "charge")
	// Output:
	// 503 IN_PROGRESS created
	// 201 {"order":"ord_1","charge":"ch_1"}
	// 201 true
	// COMPLETED finished 1 order, 1 charge
}
