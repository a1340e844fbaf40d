package problem_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/problem"
)

var errNotRefundable = problem.New(http.StatusBadRequest, "payment_not_refundable", "Payment not refundable",
	"Only a succeeded payment can be refunded.")

func TestFor(t *testing.T) {
	retry := errNotRefundable.WithHeader("retry-after", "3")
	tests := []struct {
		name string
		err  error
		want problem.Details
	}{
		{"sentinel", errNotRefundable, problem.Details{Status: 400, Code: "payment_not_refundable", Title: "Payment not refundable", Detail: "Only a succeeded payment can be refunded."}},
		{"wrapped", fmt.Errorf("refunds: create: %w", errNotRefundable), problem.Details{Status: 400, Code: "payment_not_refundable", Title: "Payment not refundable", Detail: "Only a succeeded payment can be refunded."}},
		{"joined, first problem wins", fmt.Errorf("%w: %w", errNotRefundable, problem.Invalid("a", "b")), problem.Details{Status: 400, Code: "payment_not_refundable", Title: "Payment not refundable", Detail: "Only a succeeded payment can be refunded."}},
		{"with header", retry, problem.Details{Status: 400, Code: "payment_not_refundable", Title: "Payment not refundable", Detail: "Only a succeeded payment can be refunded.", Header: map[string]string{"Retry-After": "3"}}},
		{"logged", errNotRefundable.Logged(), problem.Details{Status: 400, Code: "payment_not_refundable", Title: "Payment not refundable", Detail: "Only a succeeded payment can be refunded.", Log: true}},
		{"field", problem.Invalid("amount", "must be at least %d", 1), problem.Details{Status: 400, Code: "invalid_request", Title: "Invalid request", Detail: "amount must be at least 1.", HasField: true, Field: "amount"}},
		{"body", problem.Invalid("", "the body must be a JSON object"), problem.Details{Status: 400, Code: "invalid_request", Title: "Invalid request", Detail: "The body must be a JSON object.", HasField: true}},
		{"internal", errors.New("secret"), problem.Internal},
		{"nil", nil, problem.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, problem.For(tt.err)); diff != "" {
				t.Errorf("For(%v) mismatch (-want +got):\n%s", tt.err, diff)
			}
		})
	}
	if errNotRefundable.Problem().Header != nil {
		t.Error("WithHeader changed the sentinel it was called on")
	}
	if !errors.Is(fmt.Errorf("x: %w", retry), retry) || errors.Is(retry, errNotRefundable) {
		t.Error("WithHeader's result must be a sentinel of its own")
	}
}

func TestWrite(t *testing.T) {
	w := httptest.NewRecorder()
	problem.Renderer{TypeBase: "https://example.com/errors#"}.Write(w, nil, errNotRefundable.WithHeader("Retry-After", "2"))
	want := `{"type":"https://example.com/errors#payment_not_refundable","title":"Payment not refundable","status":400,"detail":"Only a succeeded payment can be refunded.","code":"payment_not_refundable"}`
	if w.Code != 400 || w.Body.String() != want {
		t.Errorf("Write() = %d %s, want 400 %s", w.Code, w.Body, want)
	}
	if got := w.Header(); got.Get("Content-Type") != problem.ContentType || got.Get("Retry-After") != "2" || got.Get("Content-Length") != fmt.Sprint(len(want)) {
		t.Errorf("Write() headers = %v", got)
	}
	if !problem.Logged(errors.New("x")) || problem.Logged(errNotRefundable) || !problem.Logged(errNotRefundable.Logged()) {
		t.Error("Logged() must hold for 5xx and for errors marked Logged only")
	}
}

func ExampleNew() {
	// A domain declares its errors, with their answer, where they are defined.
	errNotRefundable := problem.New(http.StatusBadRequest, "payment_not_refundable", "Payment not refundable",
		"Only a succeeded payment can be refunded.")
	w := httptest.NewRecorder()
	problem.Write(w, nil, fmt.Errorf("refunds: create pay_123: %w", errNotRefundable))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Println(w.Body.String())
	// Output:
	// 400 application/problem+json
	// {"type":"https://github.com/oncehq/once/blob/main/README.md#payment_not_refundable","title":"Payment not refundable","status":400,"detail":"Only a succeeded payment can be refunded.","code":"payment_not_refundable"}
}

// FuzzRender checks the renderer on any text: the body is valid JSON that
// carries the details back exactly, with the field only when it has one.
func FuzzRender(f *testing.F) {
	f.Add(400, "invalid_request", "Invalid request", "amount must be at least 1.", true, "amount")
	f.Add(409, "x", "\u2028", "\"</script>\x00", false, "")
	f.Add(500, "", "", "", true, "")
	f.Fuzz(func(t *testing.T, status int, code, title, detail string, hasField bool, field string) {
		d := problem.Details{Status: status, Code: code, Title: title, Detail: detail, HasField: hasField, Field: field}
		var got map[string]any
		if err := json.Unmarshal(problem.Renderer{}.Body(d), &got); err != nil {
			t.Fatalf("Body(%+v) is not JSON: %v", d, err)
		}
		valid := func(s string) string { // as encoding/json coerces strings: one U+FFFD per invalid byte
			var b strings.Builder
			for _, r := range s {
				b.WriteRune(r)
			}
			return b.String()
		}
		if got["code"] != valid(code) || got["title"] != valid(title) || got["detail"] != valid(detail) ||
			got["status"] != float64(status) || got["type"] != valid(problem.DefaultTypeBase+code) {
			t.Fatalf("Body(%+v) = %v", d, got)
		}
		f, has := got["field"]
		switch {
		case has != hasField:
			t.Fatalf("Body(%+v): field present %v, want %v", d, has, hasField)
		case hasField && field == "" && f != nil:
			t.Fatalf("Body(%+v): field %v, want null", d, f)
		case hasField && field != "" && f != valid(field):
			t.Fatalf("Body(%+v): field %v, want %q", d, f, field)
		}
	})
}
