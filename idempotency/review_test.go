package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
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
