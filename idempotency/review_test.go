package idempotency_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/problem"
)

func reviewMiddleware(t *testing.T, store idempotency.Store) *idempotency.Middleware {
	t.Helper()
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func reviewPost(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v1/things", strings.NewReader(body))
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestReviewExternalRejectedCompletionIs500: middleware.go says an External
// completion whose effect is rejected answers 500, unstored. An effect whose
// business answer is a 4xx leaks that 4xx to the client instead, unstored,
// while the record stays IN_PROGRESS for reconciliation.
func TestReviewExternalRejectedCompletionIs500(t *testing.T) {
	store := memory.New()
	mw := reviewMiddleware(t, store)
	notThere := problem.New(http.StatusBadRequest, "payment_not_refundable", "Not refundable", "no")
	h := mw.External("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		// the call out happened; its local effect cannot be written
		call.AddEffect(memory.Require("things", "absent", notThere))
		w.WriteHeader(http.StatusCreated)
	}), idempotency.ResolverFunc(nil))
	got := reviewPost(h, "k", `{}`)
	rec, err := store.Get(t.Context(), idempotency.NewKey("acme", "k"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Code != http.StatusInternalServerError {
		t.Errorf("rejected External completion = %d %s (record %s, nothing stored), want 500 as documented",
			got.Code, got.Body, rec.Status)
	}
	_ = errors.New
}

// TestReviewReplayHeadersMultiValue: the replay of an answer must carry the
// headers the first answer carried.
func TestReviewReplayHeadersMultiValue(t *testing.T) {
	mw := reviewMiddleware(t, memory.New())
	h := mw.Atomic("POST /v1/things", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); !ok {
			return
		}
		w.Header().Add("Link", `</v1/things/1>; rel="self"`)
		w.Header().Add("Link", `</v1/things>; rel="collection"`)
		w.WriteHeader(http.StatusCreated)
	}))
	first := reviewPost(h, "k", `{}`)
	again := reviewPost(h, "k", `{}`)
	if got, want := again.Header().Values("Link"), first.Header().Values("Link"); len(got) != len(want) {
		t.Errorf("replay Link = %q, want %q (the first answer's)", got, want)
	}
}
