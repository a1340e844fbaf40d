package refunds

import (
	"slices"
	"testing"

	"github.com/oncehq/once/internal/jsonbody/jsonbodytest"
	"github.com/oncehq/once/internal/payments"
)

// FuzzDecodeRefund checks that Decode never panics; that it refuses a body
// only with a *problem.FieldError answered as 400 and naming the field; that
// every request it accepts names a payment ID, a non-negative amount and a
// reason of Reasons (or none); that every body it accepts can be
// fingerprinted and decodes as its canonical form does; and that every
// request it accepts re-encodes to a body that decodes to the same request.
func FuzzDecodeRefund(f *testing.F) {
	for _, seed := range []string{
		`{"payment":"pay_abcdefghijklmnopqrstuvwx"}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","amount":5,"reason":"duplicate","metadata":{"a":"b"}}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","amount":null,"reason":null,"metadata":null}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","metadata":{}}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","amount":0}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvw1"}`, `{"payment":"PAY_ABCDEFGHIJKLMNOPQRSTUVWX"}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","amount":1e2}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","reason":"Duplicate"}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvw"}`,
		`{"payment":"re_abcdefghijklmnopqrstuvwx"}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","payment":"pay_abcdefghijklmnopqrstuvw2"}`,
		`{"payment":"pay_abcdefghijklmnopqrstuvwx","refund":1}`,
		`{"amount":5}`, `[]`, `null`, `{`, "", "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Decode(body)
		if err != nil {
			jsonbodytest.CheckRefusal(t, body, err, []string{"payment", "amount", "reason", "metadata"})
			return
		}
		if !payments.ValidID(req.Payment) || req.Amount < 0 || req.Amount > payments.MaxAmount || req.Reason != "" && !slices.Contains(Reasons, req.Reason) ||
			req.Metadata != nil && len(req.Metadata) == 0 {
			t.Fatalf("Decode(%q) accepted %+v", body, req)
		}
		jsonbodytest.CheckRoundTrips(t, body, req, Decode)
	})
}
