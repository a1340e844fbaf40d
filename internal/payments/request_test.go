package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency/problem"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/jsonbody/jsonbodytest"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Request
	}{
		{
			name: "minimal",
			body: `{"amount":2500,"currency":"eur","customer":"cus_42"}`,
			want: Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Source: "tok_visa"},
		},
		{
			name: "everything",
			body: `{"amount": 1, "currency": "USD", "customer": "c", "description": "Order 1001",
				"metadata": {"order": "1001", "b": ""}, "source": "tok_mastercard"}`,
			want: Request{Amount: 1, Currency: "usd", Customer: "c", Description: "Order 1001",
				Metadata: map[string]string{"order": "1001", "b": ""}, Source: "tok_mastercard"},
		},
		{
			name: "maximum amount",
			body: `{"amount":99999999,"currency":"JPY","customer":"c"}`,
			want: Request{Amount: 99999999, Currency: "jpy", Customer: "c", Source: "tok_visa"},
		},
		{
			name: "nulls for optional fields",
			body: `{"amount":5,"currency":"gbp","customer":"c","description":null,"metadata":null,"source":null}`,
			want: Request{Amount: 5, Currency: "gbp", Customer: "c", Source: "tok_visa"},
		},
		{
			name: "empty metadata",
			body: `{"amount":5,"currency":"gbp","customer":"c","metadata":{}}`,
			want: Request{Amount: 5, Currency: "gbp", Customer: "c", Source: "tok_visa"},
		},
		{
			name: "escaped and non-ASCII text",
			body: `{"amount":5,"currency":"chf","customer":"Zo\u00eb","description":"caf\u00e9 ☕"}`,
			want: Request{Amount: 5, Currency: "chf", Customer: "Zoë", Description: "café ☕", Source: "tok_visa"},
		},
		{
			name: "surrogate pair and escaped backslash",
			body: `{"amount":5,"currency":"usd","customer":"\ud83d\ude00 \\ud800"}`,
			want: Request{Amount: 5, Currency: "usd", Customer: "😀 \\ud800", Source: "tok_visa"},
		},
		{
			name: "limits exactly",
			body: fmt.Sprintf(`{"amount":5,"currency":"usd","customer":%q,"description":%q,"metadata":{%q:%q}}`,
				strings.Repeat("é", 255), strings.Repeat("x", 1000), strings.Repeat("k", 40), strings.Repeat("v", 500)),
			want: Request{Amount: 5, Currency: "usd", Customer: strings.Repeat("é", 255), Description: strings.Repeat("x", 1000),
				Metadata: map[string]string{strings.Repeat("k", 40): strings.Repeat("v", 500)}, Source: "tok_visa"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.body))
			if err != nil {
				t.Fatalf("Decode(%s) error = %v", tt.body, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode(%s) mismatch (-want +got):\n%s", tt.body, diff)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	meta := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"amount":5,"currency":"usd","customer":"c","metadata":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":"v"`, i)
		}
		b.WriteString("}}")
		return b.String()
	}
	const ok = `"currency":"usd","customer":"c"`
	tests := []struct {
		name      string
		body      string
		wantField string
		wantIn    string // substring of the reason
	}{
		{"empty body", ``, "", "not valid JSON"},
		{"not JSON", `amount=5`, "", "not valid JSON"},
		{"truncated", `{"amount":5,`, "", "not valid JSON"},
		{"trailing comma", `{"amount":5,` + ok + `,}`, "", "not valid JSON"},
		{"two documents", `{"amount":5,` + ok + `} {}`, "", "single JSON value"},
		{"trailing garbage", `{"amount":5,` + ok + `}x`, "", "single JSON value"},
		{"array", `[1,2]`, "", "JSON object"},
		{"null", `null`, "", "JSON object"},
		{"string", `"hello"`, "", "JSON object"},
		{"invalid UTF-8", "{\"amount\":5," + ok + ",\"description\":\"\xff\"}", "", "UTF-8"},
		{"lone high surrogate", `{"amount":5,"currency":"usd","customer":"\ud800"}`, "", "surrogate"},
		{"lone low surrogate", `{"amount":5,"currency":"usd","customer":"\udc00x"}`, "", "surrogate"},
		{"high surrogate and a letter", `{"amount":5,"currency":"usd","customer":"\ud800\u0041"}`, "", "surrogate"},
		{"duplicate top-level key", `{"amount":5,"amount":100000,` + ok + `}`, "amount", "more than once"},
		{"duplicate key, escaped", `{"amount":5,"\u0061mount":6,` + ok + `}`, "amount", "more than once"},
		{"duplicate metadata key", `{"amount":5,` + ok + `,"metadata":{"order":"1","order":"2"}}`, "metadata.order", "more than once"},
		{"duplicate key deep in an unknown field", `{"amount":5,` + ok + `,"x":[{"a":{"b":1,"b":2}}]}`, "x[0].a.b", "more than once"},
		{"too deep", `{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "x" + strings.Repeat("[0]", 32), "nested too deeply"},
		{"unknown field", `{"amount":5,` + ok + `,"capture":true}`, "capture", "not a known parameter"},
		{"unknown field before a bad one", `{"zzz":1,"amount":"x",` + ok + `}`, "zzz", "not a known parameter"},
		{"missing amount", `{` + ok + `}`, "amount", "required"},
		{"missing currency", `{"amount":5,"customer":"c"}`, "currency", "required"},
		{"missing customer", `{"amount":5,"currency":"usd"}`, "customer", "required"},
		{"amount zero", `{"amount":0,` + ok + `}`, "amount", "at least 1"},
		{"amount negative", `{"amount":-5,` + ok + `}`, "amount", "at least 1"},
		{"amount too large", `{"amount":100000000,` + ok + `}`, "amount", "at most 99999999"},
		{"amount overflows int64", `{"amount":99999999999999999999,` + ok + `}`, "amount", "at most 99999999"},
		{"amount fraction", `{"amount":12.5,` + ok + `}`, "amount", "integer"},
		{"amount with zero fraction", `{"amount":12.0,` + ok + `}`, "amount", "integer"},
		{"amount exponent", `{"amount":1e3,` + ok + `}`, "amount", "integer"},
		{"amount as string", `{"amount":"100",` + ok + `}`, "amount", "integer"},
		{"amount null", `{"amount":null,` + ok + `}`, "amount", "integer"},
		{"amount bool", `{"amount":true,` + ok + `}`, "amount", "integer"},
		{"currency number", `{"amount":5,"currency":978,"customer":"c"}`, "currency", "string"},
		{"currency unknown", `{"amount":5,"currency":"abc","customer":"c"}`, "currency", "ISO 4217"},
		{"currency too long", `{"amount":5,"currency":"euro","customer":"c"}`, "currency", "ISO 4217"},
		{"currency testing code", `{"amount":5,"currency":"xts","customer":"c"}`, "currency", "ISO 4217"},
		{"currency dotted capital I", `{"amount":5,"currency":"\u0130NR","customer":"c"}`, "currency", "ISO 4217"},
		{"currency Kelvin sign", `{"amount":5,"currency":"\u212aES","customer":"c"}`, "currency", "ISO 4217"},
		{"currency fullwidth letters", `{"amount":5,"currency":"\uff25\uff35\uff32","customer":"c"}`, "currency", "ISO 4217"},
		{"currency with a space", `{"amount":5,"currency":"eu ","customer":"c"}`, "currency", "ISO 4217"},
		{"currency with a NUL", `{"amount":5,"currency":"eu\u0000","customer":"c"}`, "currency", "ISO 4217"},
		{"customer empty", `{"amount":5,"currency":"usd","customer":""}`, "customer", "between 1 and 255"},
		{"customer too long", `{"amount":5,"currency":"usd","customer":"` + strings.Repeat("c", 256) + `"}`, "customer", "between 1 and 255"},
		{"customer control character", `{"amount":5,"currency":"usd","customer":"a\u0000b"}`, "customer", "control"},
		{"customer object", `{"amount":5,"currency":"usd","customer":{"id":"c"}}`, "customer", "string"},
		{"description too long", `{"amount":5,` + ok + `,"description":"` + strings.Repeat("d", 1001) + `"}`, "description", "at most 1000"},
		{"description number", `{"amount":5,` + ok + `,"description":5}`, "description", "string"},
		{"metadata array", `{"amount":5,` + ok + `,"metadata":["a"]}`, "metadata", "object"},
		{"metadata string", `{"amount":5,` + ok + `,"metadata":"a=b"}`, "metadata", "object"},
		{"metadata too many keys", meta(21), "metadata", "at most 20"},
		{"metadata number value", `{"amount":5,` + ok + `,"metadata":{"order":1001}}`, "metadata.order", "string"},
		{"metadata null value", `{"amount":5,` + ok + `,"metadata":{"order":null}}`, "metadata.order", "string"},
		{"metadata value too long", `{"amount":5,` + ok + `,"metadata":{"order":"` + strings.Repeat("v", 501) + `"}}`, "metadata.order", "at most 500"},
		{"metadata key too long", `{"amount":5,` + ok + `,"metadata":{"` + strings.Repeat("k", 41) + `":"v"}}`, "metadata." + strings.Repeat("k", 41), "longer than 40"},
		{"metadata empty key", `{"amount":5,` + ok + `,"metadata":{"":"v"}}`, "metadata", "must not be empty"},
		{"source empty", `{"amount":5,` + ok + `,"source":""}`, "source", "between 1 and 255"},
		{"source with spaces", `{"amount":5,` + ok + `,"source":"tok visa"}`, "source", "letters, digits"},
		{"source number", `{"amount":5,` + ok + `,"source":4242}`, "source", "string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.body))
			var verr *problem.FieldError
			if !errors.As(err, &verr) {
				t.Fatalf("Decode(%.80s) = %+v, %v; want a *problem.FieldError", tt.body, got, err)
			}
			if verr.Field != tt.wantField {
				t.Errorf("Decode(%.80s) field = %q, want %q (reason %q)", tt.body, verr.Field, tt.wantField, verr.Reason)
			}
			if !strings.Contains(verr.Reason, tt.wantIn) {
				t.Errorf("Decode(%.80s) reason = %q, want it to contain %q", tt.body, verr.Reason, tt.wantIn)
			}
		})
	}
	if _, err := Decode([]byte(meta(20))); err != nil {
		t.Errorf("Decode(20 metadata keys) error = %v, want nil", err)
	}
}

func TestDecodeWithSource(t *testing.T) {
	const ok = `"amount":5,"currency":"USD","customer":"c"`
	tests := []struct {
		name      string
		body      string
		want      Request
		wantField string // empty: accepted
	}{
		{name: "source given", body: `{` + ok + `,"source":"tok_visa"}`, want: Request{Amount: 5, Currency: "usd", Customer: "c", Source: "tok_visa"}},
		{name: "source missing", body: `{` + ok + `}`, wantField: "source"},
		{name: "source null", body: `{` + ok + `,"source":null}`, wantField: "source"},
		{name: "source empty", body: `{` + ok + `,"source":""}`, wantField: "source"},
		{name: "source too long", body: `{` + ok + `,"source":"` + strings.Repeat("t", 256) + `"}`, wantField: "source"},
		{name: "other fields first", body: `{"amount":0,"currency":"USD","customer":"c"}`, wantField: "amount"},
		{name: "required fields in order", body: `{"amount":5,"currency":"USD"}`, wantField: "customer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeWithSource([]byte(tt.body))
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("DecodeWithSource(%.80s) error = %v, want nil", tt.body, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("DecodeWithSource(%.80s) mismatch (-want +got):\n%s", tt.body, diff)
				}
				return
			}
			var verr *problem.FieldError
			if !errors.As(err, &verr) || verr.Field != tt.wantField {
				t.Errorf("DecodeWithSource(%.80s) = %+v, %v; want a *problem.FieldError for %q", tt.body, got, err, tt.wantField)
			}
		})
	}
}

// FuzzDecodePayment checks that Decode never panics, that it only ever fails
// with a *problem.FieldError, that every body it accepts can be fingerprinted
// (so idempotency.Begin never refuses a validated request), and that every
// request it accepts round-trips through its JSON encoding.
func FuzzDecodePayment(f *testing.F) {
	for _, seed := range []string{
		`{"amount":2500,"currency":"eur","customer":"cus_42"}`,
		`{"amount":1,"currency":"USD","customer":"c","description":"d","metadata":{"a":"b"},"source":"tok_visa"}`,
		`{"amount":5,"currency":"gbp","customer":"c","description":null,"metadata":null,"source":null}`,
		`{"amount":5,"amount":6,"currency":"gbp","customer":"c"}`,
		`{"amount":5,"currency":"gbp","customer":"c","metadata":{"a":"1","a":"2"}}`,
		`{"amount":1e3,"currency":"gbp","customer":"c"}`,
		`{"amount":-0,"currency":"gbp","customer":"c"}`,
		`{"amount":5,"currency":"gbp","customer":"\ud800"}`,
		`{"amount":5,"currency":"gbp","customer":"c","x":[[[[{"a":1,"a":2}]]]]}`,
		`[]`, `null`, `{`, `{"amount":5}}`, "", "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Decode(body)
		if err != nil {
			var verr *problem.FieldError
			if !errors.As(err, &verr) {
				t.Fatalf("Decode(%q) error = %v (%T), want a *problem.FieldError", body, err, err)
			}
			return
		}
		// The stored request of an External record is the canonical body;
		// it must decode to the same request (a reconciler rebuilds the
		// response from it).
		jsonbodytest.CheckRoundTrips(t, body, req, Decode)
	})
}

// FuzzDecodeWithSource checks the decoding of a charge (charges.Decode):
// DecodeWithSource never panics and refuses a body only with a
// *problem.FieldError answered as 400 and naming the field; it accepts
// exactly the bodies that Decode accepts and that name a source, and
// decodes them as Decode does; every request it accepts can be
// fingerprinted, decodes as its canonical form does and round-trips
// through its JSON encoding.
func FuzzDecodeWithSource(f *testing.F) {
	for _, seed := range []string{
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":"tok_visa"}`,
		`{"amount":1,"currency":"USD","customer":"c","description":"d","metadata":{"a":"b"},"source":"tok_chargeDeclined"}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42"}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":null}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":""}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":"tok visa"}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":"tok_visa","source":"tok_visa"}`,
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":1}`,
		`{"source":"tok_visa"}`, `[]`, `null`, `{`, "", "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeWithSource(body)
		plain, plainErr := Decode(body)
		if err != nil {
			jsonbodytest.CheckRefusal(t, body, err, []string{"amount", "currency", "customer", "description", "metadata", "source"})
			var ferr *problem.FieldError
			errors.As(err, &ferr)
			if plainErr == nil && (ferr.Field != "source" || named(body, "source")) {
				t.Fatalf("DecodeWithSource(%q) error = %v, but Decode accepts it as %+v and it names no source", body, err, plain)
			}
			return
		}
		if plainErr != nil {
			t.Fatalf("DecodeWithSource(%q) = %+v, but Decode refuses it: %v", body, req, plainErr)
		}
		if diff := cmp.Diff(plain, req); diff != "" {
			t.Fatalf("Decode and DecodeWithSource of %q mismatch (-Decode +DecodeWithSource):\n%s", body, diff)
		}
		if req.Source == "" || !named(body, "source") {
			t.Fatalf("DecodeWithSource(%q) = %+v, accepted a request that names no source", body, req)
		}
		jsonbodytest.CheckRoundTrips(t, body, req, DecodeWithSource)
	})
}

// named reports whether body, a JSON object, names the member name with a
// value other than null.
func named(body []byte, name string) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return false
	}
	raw, ok := members[name]
	return ok && string(raw) != "null"
}
