package dynamo_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/dynamotest"
)

// The writes the middleware makes once the handler has returned (the
// completion with the answer, a release, UNKNOWN, a multi-step request's
// pause, and what a refused or conflicting write then calls for) outlive the request's
// context: a client that hangs up as the work
// is done must not leave the key reserved until its lease runs out, and a
// retry must replay the answer rather than do the work again.

// leaver is a client that hangs up once the handler has done its work.
type leaver struct {
	t        *testing.T
	effected chan struct{}
}

// effect, called by the handler once its work is done, lets the client hang
// up and holds the handler until the server has cancelled r's context.
func (l *leaver) effect(r *http.Request) {
	close(l.effected)
	select {
	case <-r.Context().Done():
	case <-time.After(30 * time.Second):
		l.t.Error("the server never cancelled the request's context after the client hung up")
	}
}

// leave serves h on a real net/http server and sends one POST under key
// whose client hangs up once the handler calls l.effect. It returns once
// the middleware has finished with the request.
func (l *leaver) leave(h http.Handler, key string) {
	t := l.t
	t.Helper()
	served := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/", strings.NewReader(`{"amount":100}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idempotency.Header, key)
	sent := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	select {
	case <-l.effected:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never did its work")
	}
	cancel() // the client hangs up: the server cancels r.Context()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want it to have hung up (context canceled)", err)
	}
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("the middleware never finished the request")
	}
}

// TestWritesAfterHandlerOutliveRequest: for each mode and ending, a request
// whose client hangs up right after the handler's work leaves the key as
// that ending says (COMPLETED with the answer, released, UNKNOWN, paused
// at its recovery point), not reserved, and the work was done once.
func TestWritesAfterHandlerOutliveRequest(t *testing.T) {
	store, client, names := newStore(t)
	payments := names.ByLogicalID["PaymentsTable"]
	tests := []struct {
		name   string
		mode   idempotency.Mode
		phased bool // BeginAt, Steps.Advance, Finish
		status int  // the handler's answer
		// unknown: the handler calls Unknown.
		unknown bool
		// takenOver: an effect of the handler's is refused (its Reject
		// answers 409, stored in place of the answer), and as it is, the
		// key is taken by an External reservation of the same request,
		// since abandoned (the route's mode changed while its records
		// lived): the refusal's completion finds it, and hands it to
		// reconciliation (UNKNOWN).
		takenOver bool
		// What the record is after the request (Status "" for none), and
		// what a retry answers, and how often the work was done in all.
		wantStatus  idempotency.Status
		wantPoint   string
		wantRetry   int
		wantReplay  bool
		wantEffects int
		wantWork    int
	}{
		{name: "leased completion", mode: idempotency.Leased, status: 201,
			wantStatus: idempotency.StatusCompleted, wantRetry: 201, wantReplay: true, wantEffects: 1, wantWork: 1},
		{name: "external completion", mode: idempotency.External, status: 201,
			wantStatus: idempotency.StatusCompleted, wantRetry: 201, wantReplay: true, wantEffects: 1, wantWork: 1},
		{name: "multi-step completion", mode: idempotency.External, phased: true, status: 201,
			wantStatus: idempotency.StatusCompleted, wantPoint: "finished", wantRetry: 201, wantReplay: true, wantEffects: 1, wantWork: 1},
		// A 5xx: nothing happened, the key is released at once, so a retry
		// runs again rather than waiting out the lease behind 409s.
		{name: "leased release", mode: idempotency.Leased, status: 503,
			wantRetry: 201, wantEffects: 1, wantWork: 2},
		// An unknown outcome goes to UNKNOWN (for the reconciler) at once,
		// not when the lease has run out.
		{name: "external unknown", mode: idempotency.External, status: 504, unknown: true,
			wantStatus: idempotency.StatusUnknown, wantRetry: 409, wantWork: 1},
		// A multi-step request's 5xx gives its lease up at its recovery
		// point: a retry resumes there at once, without redoing the charge.
		{name: "multi-step pause", mode: idempotency.External, phased: true, status: 503,
			wantStatus: idempotency.StatusInProgress, wantPoint: "charged", wantRetry: 201, wantEffects: 1, wantWork: 1},
		{name: "leased refusal meets an abandoned external reservation", mode: idempotency.Leased, status: 201, takenOver: true,
			wantStatus: idempotency.StatusUnknown, wantRetry: 409, wantWork: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw := newMiddleware(t, store)
			key := idempotency.NewKey("acme", t.Name())
			var work, runs atomic.Int32 // calls out (the work), handler runs
			l := &leaver{t: t, effected: make(chan struct{})}
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				first := runs.Add(1) == 1
				var call *idempotency.Call
				var ok bool
				if tt.phased {
					call, ok = idempotency.BeginAt(w, r, "created", nil)
				} else {
					call, ok = idempotency.Begin(w, r)
				}
				if !ok {
					return
				}
				if !tt.phased || call.Steps().Point() == "created" {
					work.Add(1) // the charge, or the Leased handler's work
				}
				if tt.phased && call.Steps().Point() == "created" {
					if err := call.Steps().Advance(r.Context(), "charged", map[string]string{"charge": "ch_1"}); err != nil {
						t.Errorf("advance: %v", err)
						return
					}
				}
				if first && tt.takenOver {
					call.AddEffect(takeOverOnReject(t, store, client, names.ByLogicalID["IdempotencyTable"], payments, key))
				}
				if first {
					l.effect(r)
				}
				if tt.unknown {
					call.Unknown()
				}
				if first && tt.status >= 500 {
					w.WriteHeader(tt.status)
					return
				}
				call.AddEffect(dynamo.Insert(payments, "pk", map[string]string{"pk": key.ID()}))
				if tt.phased {
					call.Finish("finished")
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"done"}`)
			})
			h := wrap(t, mw, tt.mode, "POST /", handler)
			l.leave(h, t.Name())

			rec, err := store.Get(t.Context(), key)
			switch {
			case tt.wantStatus == "" && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record after the client left: %s at %q (err %v), want none (released)", rec.Status, rec.Point, err)
			case tt.wantStatus != "" && (err != nil || rec.Status != tt.wantStatus || rec.Point != tt.wantPoint):
				t.Errorf("record after the client left: %s at %q (err %v), want %s at %q", rec.Status, rec.Point, err, tt.wantStatus, tt.wantPoint)
			case tt.wantStatus == idempotency.StatusCompleted && (rec.Response == nil || rec.Response.Status != 201 || string(rec.Response.Body) != `{"id":"done"}`):
				t.Errorf("completed record's answer = %+v, want the handler's 201", rec.Response)
			case tt.wantStatus == idempotency.StatusInProgress && rec.ExpiresAt.After(time.Now()):
				t.Errorf("paused record's lease runs to %v, want it given up", rec.ExpiresAt)
			case tt.takenOver && rec.LeaseToken == abandonedLease:
				t.Errorf("record's lease token = %q, want a new one (handed to reconciliation)", rec.LeaseToken)
			}

			again, _ := post(h, t.Name(), `{"amount":100}`)
			if again.Code != tt.wantRetry || (again.Header().Get(idempotency.ReplayedHeader) == "true") != tt.wantReplay {
				t.Errorf("retry = %d %s (replayed %q), want %d (replayed %v)", again.Code, again.Body, again.Header().Get(idempotency.ReplayedHeader), tt.wantRetry, tt.wantReplay)
			}
			if tt.wantReplay && again.Body.String() != `{"id":"done"}` {
				t.Errorf("retry body = %s, want the first answer", again.Body)
			}
			if got := work.Load(); got != int32(tt.wantWork) {
				t.Errorf("work done %d times, want %d", got, tt.wantWork)
			}
			if got := dynamotest.Exists(t, client, payments, key.ID()); got != (tt.wantEffects == 1) {
				t.Errorf("effect written: %v, want %v", got, tt.wantEffects == 1)
			}
		})
	}
}

// abandonedLease is the lease token of the reservation takeOverOnReject
// writes.
const abandonedLease = "abandoned"

// takeOverOnReject is an effect whose condition fails, on an item it
// writes first, and whose Reject, as the store calls it, replaces key's
// record with an External reservation of the same request whose lease has
// run out, as if an External instance of the route had taken the key and
// died, then answers 409.
func takeOverOnReject(t *testing.T, store *dynamo.Store, client *dynamodb.Client, records, table string, key idempotency.Key) idempotency.Effect {
	t.Helper()
	id := key.ID() + "#taken"
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: id}}}); err != nil {
		t.Fatal(err)
	}
	effect := dynamo.Insert(table, "pk", map[string]string{"pk": id})
	effect.Reject = func(map[string]types.AttributeValue) error {
		rec, err := store.Get(t.Context(), key)
		if err != nil {
			t.Errorf("Get(%s) in Reject: %v", key.Short(), err)
		}
		rec.External, rec.LeaseToken = true, abandonedLease
		rec.ExpiresAt, rec.UpdatedAt = time.Now().Add(-time.Minute), time.Now().Add(-2*time.Minute)
		if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(records), Item: dynamo.ItemFromRecord(rec)}); err != nil {
			t.Errorf("PutItem(abandoned reservation): %v", err)
		}
		return problem.New(http.StatusConflict, "taken", "Taken", "The item is taken.")
	}
	return effect
}

// blockingStore is the DynamoDB store whose writes after the handler
// (Complete) never answer: they wait for their context to end.
type blockingStore struct {
	*dynamo.Store
	called chan completeCall
}

type completeCall struct {
	doneAtCall bool          // the context had already ended when the write began
	value      any           // the test's context value, as the write saw it
	waited     time.Duration // until the context ended
	err        error         // why it ended
}

func (s *blockingStore) Complete(ctx context.Context, _ idempotency.Record, _ string, _ []idempotency.Effect) error {
	c := completeCall{doneAtCall: ctx.Err() != nil, value: ctx.Value(ctxKey{})}
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute): // the test fails on a write left unbounded
	}
	c.waited, c.err = time.Since(start), ctx.Err()
	s.called <- c
	return ctx.Err()
}

type ctxKey struct{}

// TestDetachedWriteBounded: the completion, detached from the request's
// cancellation, still ends: a store that never answers is given up after
// Config.CompletionTimeout, and the write keeps the request's context
// values (loggers, trace ids).
func TestDetachedWriteBounded(t *testing.T) {
	base, _, _ := newStore(t)
	store := &blockingStore{Store: base, called: make(chan completeCall, 1)}
	const bound = 300 * time.Millisecond
	mw, err := idempotency.New(idempotency.Config{
		Store:             store,
		Tenant:            func(*http.Request) (string, bool) { return "acme", true },
		CompletionTimeout: bound,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Leased("POST /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		cancel := r.Context().Value(cancelKey{}).(context.CancelFunc)
		cancel() // the request ends as the work is done
		w.WriteHeader(http.StatusCreated)
	}))
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "trace-1"))
	defer cancel()
	r := httptest.NewRequestWithContext(context.WithValue(ctx, cancelKey{}, context.CancelFunc(cancel)), "POST", "/", strings.NewReader(`{}`))
	r.Header.Set(idempotency.Header, t.Name())
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(w, r); close(done) }()

	var got completeCall
	select {
	case got = <-store.called:
	case <-time.After(2 * time.Minute):
		t.Fatal("the completion never returned")
	}
	<-done
	if got.doneAtCall {
		t.Error("the completion began with the request's context already ended, want it detached from the cancellation")
	}
	if !errors.Is(got.err, context.DeadlineExceeded) || got.waited < bound || got.waited > 30*time.Second {
		t.Errorf("the completion ended after %v with %v, want %v (CompletionTimeout), then context.DeadlineExceeded", got.waited, got.err, bound)
	}
	if got.value != "trace-1" {
		t.Errorf("the completion's context value = %v, want the request's (trace-1)", got.value)
	}
	if w.Code < 500 {
		t.Errorf("answer = %d, want a 5xx (the completion failed)", w.Code)
	}
}

type cancelKey struct{}
