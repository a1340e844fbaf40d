package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/dynamotest"
)

// testStore is a Store the middleware's tests run on, with an effect a
// handler adds in it and a way to see that effect written.
type testStore struct {
	idempotency.Store
	// insert is the effect that inserts the item id (a second insert of
	// the same id is rejected).
	insert func(id string) idempotency.Effect
	// inserted reports whether the item id is written.
	inserted func(t *testing.T, id string) bool
}

// eachStore runs f as a subtest on each store: the in-memory one, and the
// DynamoDB one on tables of DynamoDB Local made for it (a subtest that
// skips when no endpoint is configured, and fails instead under
// ONCE_REQUIRE_DYNAMODB=1). f's own subtests share the store, each with
// keys and items of its own.
func eachStore(t *testing.T, f func(t *testing.T, s testStore)) {
	t.Helper()
	t.Run("memory", func(t *testing.T) {
		store := memory.New()
		f(t, testStore{
			Store:  store,
			insert: func(id string) idempotency.Effect { return memory.Insert("items", id, id) },
			inserted: func(_ *testing.T, id string) bool {
				_, ok := store.Items("items")[id]
				return ok
			},
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		client := dynamotest.Client(t)
		names := dynamotest.Tables(t, client)
		items := names.ByLogicalID["PaymentsTable"]
		f(t, testStore{
			Store:    dynamo.New(client, names.ByLogicalID["IdempotencyTable"]),
			insert:   func(id string) idempotency.Effect { return dynamo.Insert(items, "pk", map[string]string{"pk": id}) },
			inserted: func(t *testing.T, id string) bool { return dynamotest.Exists(t, client, items, id) },
		})
	})
}

// answerOf describes rec's stored answer: its status and body.
func answerOf(rec idempotency.Record) string {
	if rec.Response == nil {
		return "(no answer)"
	}
	return fmt.Sprintf("%d %q", rec.Response.Status, rec.Response.Body)
}

// sendObserved POSTs {"n":1} to path on h with key as its idempotency key,
// under an observation hook, and returns the answer and what the
// middleware observed.
func sendObserved(h http.Handler, path, key string) (*httptest.ResponseRecorder, idempotency.Observation) {
	var obs idempotency.Observation
	r := httptest.NewRequest("POST", path, strings.NewReader(`{"n":1}`))
	r = r.WithContext(idempotency.WithObservation(r.Context(), &obs))
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w, obs
}
