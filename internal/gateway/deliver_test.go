package gateway_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/gateway"
)

// TestEmulatorUndeliverableAnswer: an answer the store keeps (7 MiB of
// JSON, about 1.2 MB compressed) but Lambda cannot return, through the
// emulated REST API and the apigw adapter. Without Config.Deliverable it is
// stored with its effect, and the first answer and its replay are both 502;
// with apigw.Deliverable it is refused before the commit: 500
// response_too_large every time, no effect, no record.
func TestEmulatorUndeliverableAnswer(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < 7<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item number %d","tags":["a","b","c"]}`, i, i)
	}
	b.WriteString(`]}`)
	answer := b.String()
	tests := []struct {
		name        string
		deliverable func(idempotency.Response) error
		wantStatus  int
		wantCode    string
		wantStored  bool
	}{
		{"without Deliverable", nil, 502, "", true},
		{"with apigw.Deliverable", apigw.Deliverable, 500, "response_too_large", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: apigw.Tenant, Deliverable: tt.deliverable, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /v1/payments", mw.Atomic("POST /v1/payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				call.AddEffect(memory.Insert("payments", call.Key().ID(), "paid"))
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(answer))
			})))
			srv, _ := serve(t, &fakes{}, func(e *gateway.Emulator) { e.Invoke = gateway.LambdaProxy(apigw.NewLambda(mux)) })
			header := map[string]string{"Authorization": bearer["Authorization"], "Idempotency-Key": "big", "Content-Type": "application/json"}
			for _, attempt := range []string{"first", "retry"} {
				r := do(t, "POST", srv.URL+"/v1/payments", `{"amount":1}`, header)
				if r.status != tt.wantStatus || !strings.Contains(r.body, tt.wantCode) {
					t.Errorf("%s: %d %.80q, want %d %s", attempt, r.status, r.body, tt.wantStatus, tt.wantCode)
				}
			}
			_, err = store.Get(t.Context(), idempotency.NewKey("acme", "big"))
			if stored := err == nil; stored != tt.wantStored || len(store.Items("payments")) == 1 != tt.wantStored {
				t.Errorf("record stored %v (%v), effects %d; want stored and the effect: %v", stored, err, len(store.Items("payments")), tt.wantStored)
			}
		})
	}
}
