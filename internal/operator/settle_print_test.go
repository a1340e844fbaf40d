package operator

import (
	"bytes"
	"strings"
	"testing"
)

// TestPrintSettle: settle-order's text prints only what the run knows: a
// run that failed before it read anything again prints no empty record,
// order or answer; one that read them prints them.
func TestPrintSettle(t *testing.T) {
	base := settleOrderView{Record: "acme#h", Route: "POST /v1/orders", Status: "UNKNOWN", Point: "order_created", LeaseToken: "tok", Outcome: outcomeCharged, Charge: "ch_1"}
	read := base
	read.StatusAfter, read.PointAfter, read.AnswerStatus = "COMPLETED", "finished", 201
	read.OrderStatusAfter, read.OrderChargeAfter, read.OrderReceiptAfter, read.Settled = "paid", "ch_1", "queued", true
	tests := []struct {
		name      string
		v         settleOrderView
		want, not []string
	}{
		{"failed early", base, []string{"settled false; 0 provider call(s)\n"}, []string{"record ,", "answer 0", "order ,", "charge ,", "receipt ;"}},
		{"settled", read, []string{"settled true: record COMPLETED at finished, answer 201; order paid, charge ch_1, receipt queued; 0 provider call(s)\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := (&Tool{out: &out}).printSettle(tt.v, false); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("printSettle = %q, want %q in it", out.String(), w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("printSettle = %q, want no %q in it", out.String(), n)
				}
			}
		})
	}
}
