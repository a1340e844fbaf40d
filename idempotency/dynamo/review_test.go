package dynamo_test

import (
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

// TestReviewTooLargeAnswerLeavesNoReservation: README "Large answers": an
// answer larger than the store keeps answers 500 response_too_large and
// commits nothing. Through Leased and External routes it must not leave the
// key reserved either (External: nothing could ever complete it).
func TestReviewTooLargeAnswerLeavesNoReservation(t *testing.T) {
	store, _, _ := newStore(t)
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	huge := func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		body := make([]byte, dynamo.MaxStoredBody+1)
		rand.Read(body)
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}
	routes := map[string]http.Handler{
		"leased":   mw.Leased("POST /v1/leased", http.HandlerFunc(huge)),
		"external": mw.External("POST /v1/external", http.HandlerFunc(huge), idempotency.ResolverFunc(nil)),
	}
	for name, h := range routes {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(`{}`))
			r.Header.Set(idempotency.Header, name)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			rec, err := store.Get(t.Context(), idempotency.NewKey("acme", name))
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "response_too_large") {
				t.Errorf("too large answer = %d (%d bytes), want 500 response_too_large", w.Code, w.Body.Len())
			}
			if !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after a too-large answer: %s (err %v), want none", rec.Status, err)
			}
			if err == nil && rec.External {
				// What the reconciler would do: complete it with the same answer.
				newLease := idempotency.NewToken()
				if err := store.MarkUnknown(t.Context(), rec.Key, rec.LeaseToken, newLease, rec.ExpiresAt, rec.UpdatedAt); err != nil {
					t.Fatal(err)
				}
				done := rec
				done.Status, done.LeaseToken = idempotency.StatusCompleted, newLease
				done.Response = &idempotency.Response{Status: 201, Body: make([]byte, dynamo.MaxStoredBody+1)}
				rand.Read(done.Response.Body)
				err := store.Complete(t.Context(), done, newLease, nil)
				t.Errorf("the reconciler's completion of it: %v: the key stays UNKNOWN until its retention", err)
			}
		})
	}
}

// TestReviewMisconfigurationIsNot503: TestMissingTable holds the store to
// "a misconfiguration is not reported as the store being unavailable (which
// would tell clients to retry)"; through the middleware it is answered 503
// store_unavailable with Retry-After: 1 all the same.
func TestReviewMisconfigurationIsNot503(t *testing.T) {
	client := dynamotest.Client(t)
	mw, err := idempotency.New(idempotency.Config{Store: dynamo.New(client, "once-no-such-table"), Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Atomic("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{}`))
	r.Header.Set(idempotency.Header, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code == http.StatusServiceUnavailable {
		t.Errorf("missing table = %d %s Retry-After %q, want 500 internal_error (not a retryable 503)", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}
