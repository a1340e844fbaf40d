package fault

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/oncehq/once/idempotency"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		header  string // Once-Fault value; empty for none
		point   string // point checked
		want    bool   // crash expected
	}{
		{name: "matching point", enabled: true, header: AfterComplete, point: AfterComplete, want: true},
		{name: "after-reserve", enabled: true, header: AfterReserve, point: AfterReserve, want: true},
		{name: "after-provider-call", enabled: true, header: AfterProviderCall, point: AfterProviderCall, want: true},
		{name: "recovery point of a multi-step request", enabled: true, header: "after-order-created", point: "after-order-created", want: true},
		{name: "engine's name for a recovery point", enabled: true, header: "after-finished", point: idempotency.PointAfter("finished"), want: true},
		{name: "other point", enabled: true, header: AfterComplete, point: AfterReserve},
		{name: "upper case is not a point", enabled: true, header: "after-Finished", point: "after-Finished"},
		{name: "underscores are not a point", enabled: true, header: "after-charge_created", point: "after-charge_created"},
		{name: "no header", enabled: true, point: AfterReserve},
		{name: "unknown value", enabled: true, header: "before-everything", point: "before-everything"},
		{name: "disabled ignores the header", enabled: false, header: AfterComplete, point: AfterComplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var crashed *Crash
			h := Middleware(tt.enabled, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() {
					if v := recover(); v != nil {
						c, ok := AsCrash(v)
						if !ok {
							panic(v)
						}
						crashed = &c
					}
				}()
				Check(r.Context(), tt.point)
			}))
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			if tt.header != "" {
				r.Header.Set(Header, tt.header)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got := crashed != nil; got != tt.want {
				t.Fatalf("crashed = %v, want %v", got, tt.want)
			}
			if crashed != nil && crashed.Point != tt.point {
				t.Errorf("Crash.Point = %q, want %q", crashed.Point, tt.point)
			}
		})
	}
}

func TestAsCrash(t *testing.T) {
	if _, ok := AsCrash("boom"); ok {
		t.Errorf(`AsCrash("boom") = _, true, want false`)
	}
	if c, ok := AsCrash(Crash{Point: AfterReserve}); !ok || c.Point != AfterReserve {
		t.Errorf("AsCrash(Crash) = %v, %v, want the crash, true", c, ok)
	}
}
