package dynamo_test

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
)

// TestMemoryStoreAnswersAsDynamoDB: a handler tested on the in-memory store
// gets the answer it gets in production, on DynamoDB, at the DynamoDB
// store's bounds: 99 effects and the record go through, 100 do not (100
// items a transaction); an answer over MaxStoredBody once compressed is
// refused, one that compresses below it is stored; in each mode.
func TestMemoryStoreAnswersAsDynamoDB(t *testing.T) {
	s, _, names := newStore(t)
	table := names.ByLogicalID["PaymentsTable"]
	incompressible := make([]byte, dynamo.MaxStoredBody+1)
	_, _ = rand.Read(incompressible)
	tests := []struct {
		name    string
		effects int
		body    []byte
		want    int
	}{
		{"99 effects", 99, nil, http.StatusCreated},
		{"100 effects", 100, nil, http.StatusInternalServerError},
		{"a body over MaxStoredBody", 0, incompressible, http.StatusInternalServerError},
		{"a body that compresses below it", 0, []byte(strings.Repeat("a", dynamo.MaxStoredBody+1)), http.StatusCreated},
	}
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				run := func(store idempotency.Store, effect func(i int) idempotency.Effect) int {
					mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
					if err != nil {
						t.Fatal(err)
					}
					h := mw.Wrap(mode, "POST /v1/batch", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						call, ok := idempotency.Begin(w, r)
						if !ok {
							return
						}
						for i := range tt.effects {
							call.AddEffect(effect(i))
						}
						w.WriteHeader(http.StatusCreated)
						w.Write(tt.body)
					}))
					r := httptest.NewRequest("POST", "/v1/batch", strings.NewReader(`{}`))
					r.Header.Set(idempotency.Header, "batch-"+t.Name())
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w.Code
				}
				mem := run(memory.New(), func(i int) idempotency.Effect { return memory.Insert("items", fmt.Sprint(i), i) })
				ddb := run(s, func(i int) idempotency.Effect {
					return dynamo.Insert(table, "pk", map[string]string{"pk": fmt.Sprintf("%s-%d", t.Name(), i)})
				})
				if mem != tt.want || ddb != tt.want {
					t.Errorf("memory store answered %d, DynamoDB store %d; want %d from both", mem, ddb, tt.want)
				}
			})
		}
	}
}
