package httpapi_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// TestEffectsDroppedMetric: reserve_effects_dropped (alarmed) is counted
// once exactly when an answer is stored without the effects it should have
// carried, against DynamoDB Local: an External request whose completion's
// effects alone, or whose release effects (the holds given back), are too
// large for one write, completed with response_too_large without them (the
// holds kept), also when its reservation was released meanwhile and the
// answer is committed in its place. Never where nothing is stored without its effects: an
// External answer too large stored as response_too_large with its effects,
// a Leased request released (its completion or its release too large:
// nothing is stored, Leased holds nothing, a retry executes again), an
// Atomic commit too large (nothing written at all).
func TestEffectsDroppedMetric(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	store := dynamo.New(client, names.ByLogicalID["IdempotencyTable"])
	payments := names.ByLogicalID["PaymentsTable"]
	blob := make([]byte, 340_000)
	rand.Read(blob)
	oneMiB := make([]byte, 1<<20) // incompressible: three chunk items
	rand.Read(oneMiB)
	// over is 13 effects of 340 KB: over a transaction's 4 MB alone.
	over := func(prefix string) []idempotency.Effect {
		out := make([]idempotency.Effect, 13)
		for i := range out {
			out[i] = dynamo.Insert(payments, "pk", map[string]any{"pk": fmt.Sprintf("%s#%d", prefix, i), "blob": blob})
		}
		return out
	}
	tests := []struct {
		name        string
		mode        idempotency.Mode
		effects     int  // completion effects of 340 KB each
		release     bool // release effects over 4 MB, the handler answering 503
		answerLarge bool // a 1 MiB answer
		gone        bool // the reservation released (deleted) while the handler runs
		want        map[string]int
	}{
		{name: "external, effects alone too large", mode: idempotency.External, effects: 13,
			want: map[string]int{"reserve_effects_dropped": 1}},
		{name: "external, reservation gone, effects alone too large", mode: idempotency.External, effects: 13, gone: true,
			want: map[string]int{"reserve_effects_dropped": 1}},
		{name: "external, release effects too large", mode: idempotency.External, release: true,
			want: map[string]int{"reserve_effects_dropped": 1}},
		{name: "external, answer too large, effects kept", mode: idempotency.External, effects: 10, answerLarge: true,
			want: map[string]int{"reserve_store_error": 1}},
		{name: "leased, completion too large", mode: idempotency.Leased, effects: 13,
			want: map[string]int{"reserve_store_error": 1}},
		{name: "leased, release effects too large", mode: idempotency.Leased, release: true,
			want: map[string]int{"reserve_store_error": 1}},
		{name: "atomic, commit too large", mode: idempotency.Atomic, effects: 13,
			want: map[string]int{"reserve_store_error": 1}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: testTenant, OnError: httpapi.WriteError})
			if err != nil {
				t.Fatal(err)
			}
			route := fmt.Sprintf("POST /v1/dropped/%d", i)
			prefix := fmt.Sprintf("%s#%d", t.Name(), i)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				if tt.gone {
					// As the reconciler's release of a reservation it
					// found had no effect: the key is free when the
					// request completes, and its answer is committed.
					_, err := client.DeleteItem(r.Context(), &dynamodb.DeleteItemInput{
						TableName:           aws.String(names.ByLogicalID["IdempotencyTable"]),
						Key:                 map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: idempotency.NewKey("acme", fmt.Sprintf("dropped-%d", i)).ID()}},
						ConditionExpression: aws.String("attribute_exists(" + dynamo.AttrPK + ")"),
					})
					if err != nil {
						t.Errorf("delete the reservation: %v", err)
					}
				}
				if tt.release {
					for _, e := range over(prefix + "#release") {
						call.AddReleaseEffect(e)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				if tt.effects > 0 {
					for _, e := range over(prefix)[:tt.effects] {
						call.AddEffect(e)
					}
				}
				w.WriteHeader(http.StatusCreated)
				if tt.answerLarge {
					w.Write(oneMiB)
				}
			})
			var wrapped http.Handler
			switch tt.mode {
			case idempotency.External:
				wrapped = mw.External(route, handler, idempotency.ResolverFunc(func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
					return idempotency.Resolution{}, errors.New("no record here is reconciled")
				}))
			default:
				wrapped = mw.Wrap(tt.mode, route, handler)
			}
			out := &lambdatest.Buffer{}
			h := httpapi.NewHandler(httpapi.Deps{
				Routes:  []httpapi.Route{{Pattern: route, Handler: wrapped}},
				Tenant:  testTenant,
				Logger:  slog.New(slog.NewJSONHandler(&lambdatest.Buffer{}, nil)),
				Metrics: metrics.New(out, "once", map[string]string{"Service": "api"}),
			})
			r := httptest.NewRequest(http.MethodPost, strings.TrimPrefix(route, "POST "), strings.NewReader(`{}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(idempotency.Header, fmt.Sprintf("dropped-%d", i))
			r.Header.Set(tenantHeader, "acme")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "response_too_large") {
				t.Errorf("answer = %d %.200s, want 500 response_too_large", w.Code, w.Body)
			}
			if diff := cmp.Diff(tt.want, lambdatest.Counts(t, out.String(), "api")); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}
