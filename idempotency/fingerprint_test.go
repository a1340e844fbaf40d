package idempotency

import (
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFingerprint(t *testing.T) {
	base := `{"amount":100,"currency":"usd","metadata":{"a":"1","b":"2"}}`
	tests := []struct {
		name         string
		method, path string
		body         string
		same         bool
	}{
		{"identical", "POST", "POST /v1/payments", base, true},
		{"key order and whitespace", "POST", "POST /v1/payments", "{ \"metadata\": {\"b\":\"2\", \"a\":\"1\"},\n \"currency\":\"usd\", \"amount\": 100 }", true},
		{"number forms", "POST", "POST /v1/payments", `{"amount":1.0e2,"currency":"usd","metadata":{"a":"1","b":"2"}}`, true},
		{"escaped strings", "POST", "POST /v1/payments", `{"amount":100,"currency":"\u0075sd","metadata":{"a":"1","b":"2"}}`, true},
		{"other value", "POST", "POST /v1/payments", `{"amount":101,"currency":"usd","metadata":{"a":"1","b":"2"}}`, false},
		{"other route", "POST", "POST /v1/charges", base, false},
		{"other method", "PUT", "POST /v1/payments", base, false},
	}
	want := fp(t, "POST", "POST /v1/payments", base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fp(t, tt.method, tt.path, tt.body)
			if (got == want) != tt.same {
				t.Errorf("Fingerprint(%s) == base: %v, want %v", tt.body, got == want, tt.same)
			}
		})
	}
}

// TestFingerprintStored holds fingerprints to the values stored records
// have: a change of the encoding would make every replay a mismatch.
func TestFingerprintStored(t *testing.T) {
	tests := []struct {
		method, route, path, body, want string
	}{
		{"POST", "POST /v1/payments", "", `{"amount":1234,"currency":"usd","customer":"cus_1"}`, "6ce9c5921aa7e94fc11653ed495e23a9d1f77055e68fea03ecd1d794cb22cf6e"},
		{"POST", "POST /v1/x", "", "", "ee8521782547de31563cdf817633a904e02a7fbb71b708bac45a2fc682ba5924"},
		{"POST", "POST /v1/payments/{id}/capture", "2:id6:pay_12", `{}`, "6c21ac0ef3562b220bd146e04224c69b5dcbe0abcc0fcf0a4243549e1c342e99"},
		{"DELETE", "/v1/a", "path=/v1/a", `[1]`, "bb3e27aed59df731e2f8a16d575438df80f15ec7efd4ecda7c2455b6d8fb2b84"},
	}
	for _, tt := range tests {
		var body []byte
		if tt.body != "" {
			body = []byte(tt.body)
		}
		if got := fingerprintAt(tt.method, tt.route, tt.path, body); got != tt.want {
			t.Errorf("fingerprintAt(%q, %q, %q, %q) = %s, want %s", tt.method, tt.route, tt.path, tt.body, got, tt.want)
		}
	}
}

// TestPathPart: a route that matches one path adds nothing to its
// fingerprint (the fingerprints of its stored records stay what they were);
// a subtree route (a trailing "/") adds the escaped path, however it was
// routed; a route with wildcards adds their values when a ServeMux routed
// the request by it, else the escaped path.
func TestPathPart(t *testing.T) {
	tests := []struct {
		route, pattern, path, want string
	}{
		{"POST /v1/payments", "POST /v1/payments", "/v1/payments", ""},
		{"POST /v1/payments", "", "/v1/payments", ""},
		{"POST /v1/notes/{$}", "POST /v1/notes/{$}", "/v1/notes/", ""},
		{"POST /v1/payments/{id}/capture", "POST /v1/payments/{id}/capture", "/v1/payments/pay_1/capture", "2:id5:pay_1"},
		{"POST /v1/payments/{id}/capture", "", "/v1/payments/pay_1/capture", "path=/v1/payments/pay_1/capture"},
		{"POST /v1/notes/", "POST /v1/notes/", "/v1/notes/a/archive", "path=/v1/notes/a/archive"},
		{"POST /v1/notes/", "", "/v1/notes/a%2Fb", "path=/v1/notes/a%2Fb"},
		{"/", "/", "/x%20y", "path=/x%20y"},
		{"POST /v1/notes/{id}/", "POST /v1/notes/{id}/", "/v1/notes/a/b", "path=/v1/notes/a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.route+" "+tt.path, func(t *testing.T) {
			mux := http.NewServeMux()
			var got string
			mux.HandleFunc(tt.route, func(_ http.ResponseWriter, r *http.Request) {
				if tt.pattern == "" {
					r.Pattern = "" // routed by something else
				}
				got = pathPart(tt.route, r)
			})
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", tt.path, nil))
			if got != tt.want {
				t.Errorf("pathPart(%q) of %s = %q, want %q", tt.route, tt.path, got, tt.want)
			}
		})
	}
}

func TestFingerprintUnambiguous(t *testing.T) {
	// Without length prefixes these two would hash the same bytes.
	if Fingerprint("POST", "ab", []byte("c")) == Fingerprint("POST", "a", []byte("bc")) {
		t.Error("Fingerprint does not separate its parts")
	}
}

// TestCanonicalRejectsInvalid: a body that is not a JSON document is refused
// with an error a caller can tell by errors.Is(err, ErrBodyInvalid), from
// Canonical as from RequestFingerprint.
func TestCanonicalRejectsInvalid(t *testing.T) {
	for _, body := range []string{"", "{", `{"a":}`, "nope"} {
		if _, err := Canonical([]byte(body)); !errors.Is(err, ErrBodyInvalid) {
			t.Errorf("Canonical(%q) = %v, want an error matching ErrBodyInvalid", body, err)
		}
		if body == "" {
			continue // an empty body is a request body of its own
		}
		if _, err := RequestFingerprint("POST", "POST /v1/x", []byte(body)); !errors.Is(err, ErrBodyInvalid) {
			t.Errorf("RequestFingerprint(%q) = %v, want an error matching ErrBodyInvalid", body, err)
		}
	}
}

// TestCanonicalNumberPrecision: a number is accepted exactly when JCS writes
// it with its own value (compared as numbers), so that no two different
// numbers share a canonical form; the others are refused with
// ErrNumberPrecision.
func TestCanonicalNumberPrecision(t *testing.T) {
	tests := []struct {
		number string
		exact  bool
	}{
		{"1", true},
		{"1.0", true},
		{"1e0", true},
		{"10E-1", true},
		{"0.1", true},
		{"-0", true},
		{"0.000", true},
		{"100000000000000000000", true},       // 1e20: one significant digit
		{"123456789012345", true},             // 15 significant digits
		{"9007199254740991", true},            // 2^53 - 1
		{"9007199254740992", true},            // 2^53
		{"0.30000000000000004", true},         // 0.1 + 0.2, as JCS writes it
		{"3.141592653589793", true},           // math.Pi, as JCS writes it
		{"1.7976931348623157e308", true},      // the largest double
		{"5e-324", true},                      // the smallest double
		{"2.2250738585072014e-308", true},     // the smallest normal double
		{"9007199254740993", false},           // 2^53 + 1: read as 2^53
		{"-9007199254740993", false},          // its negative
		{"0.30000000000000001", false},        // read as 0.3
		{"9223372036854775807", false},        // MaxInt64: read as 2^63
		{"12345678901234567890", false},       // 20 significant digits
		{"3.14159265358979323846", false},     // pi beyond a double
		{"1e-400", false},                     // read as 0
		{"4.9e-324", false},                   // read as 5e-324 (subnormal)
		{"1.00000000000000000001e2", false},   // read as 100
		{"0.9007199254740993e16", false},      // 2^53 + 1 again, scaled
		{"1e0000000000000000000000001", true}, // 10, its exponent long
	}
	for _, tt := range tests {
		t.Run(tt.number, func(t *testing.T) {
			for _, body := range []string{tt.number, `{"a":[` + tt.number + `]}`} {
				_, err := Canonical([]byte(body))
				if tt.exact && err != nil {
					t.Errorf("Canonical(%s) = %v, want no error", body, err)
				}
				if !tt.exact && !errors.Is(err, ErrNumberPrecision) {
					t.Errorf("Canonical(%s) = %v, want ErrNumberPrecision", body, err)
				}
			}
		})
	}
	// Numbers in strings are text.
	if _, err := Canonical([]byte(`{"a":"9007199254740993","b\"9007199254740993":1}`)); err != nil {
		t.Errorf("Canonical of numbers in strings = %v, want no error", err)
	}
}

func fp(t *testing.T, method, route, body string) string {
	t.Helper()
	c, err := Canonical([]byte(body))
	if err != nil {
		t.Fatalf("Canonical(%s): %v", body, err)
	}
	return Fingerprint(method, route, c)
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"z":null,"y":true}]}`, `{"amount": 1e2}`, `"\u00e9"`, `[]`, `{"a":"\ud83d\ude00"}`, `-0`, `{`, `{"a":9007199254740993}`, `1e-400`, `0.30000000000000004`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		c, err := Canonical([]byte(body))
		if err != nil {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("Canonical(%q) = %q: not valid JSON", body, c)
		}
		// Canonical form is a fixed point, and re-encoding the same value
		// (different whitespace, key order) keeps the fingerprint.
		again, err := Canonical(c)
		if err != nil || string(again) != string(c) {
			t.Fatalf("Canonical(Canonical(%q)) = %q, %v; want %q", body, again, err, c)
		}
		var v any
		if err := json.Unmarshal(c, &v); err != nil {
			return
		}
		indented, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		c2, err := Canonical(indented)
		if err != nil {
			t.Fatalf("Canonical(re-encoded %q): %v", indented, err)
		}
		if Fingerprint("POST", "r", c2) != Fingerprint("POST", "r", c) {
			t.Fatalf("re-encoding %q changed the fingerprint: %q vs %q", body, c2, c)
		}
	})
}

func TestRequestFingerprint(t *testing.T) {
	body := []byte(`{"b": 1, "a": [true, null]}`)
	canonical, err := Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := RequestFingerprint("POST", "POST /v1/x", body)
	if want := Fingerprint("POST", "POST /v1/x", canonical); err != nil || got != want {
		t.Errorf("RequestFingerprint = %q, %v; want %q", got, err, want)
	}
	if _, err := RequestFingerprint("POST", "POST /v1/x", []byte(`{"a":`)); err == nil {
		t.Error("RequestFingerprint of invalid JSON = nil error, want one")
	}
}

// FuzzFingerprint checks that two JSON bodies get the same fingerprint
// exactly when they hold the same value, numbers compared exactly as the
// decimals they are written as: key order, whitespace and the way a number
// is written (1.0, 1e0) never matter, and any other difference always does,
// down to the last digit of a long number (Canonical refuses the numbers a
// double cannot tell apart).
func FuzzFingerprint(f *testing.F) {
	for _, p := range [][2]string{
		{`{"a":1,"b":[true,null]}`, `{ "b": [true, null], "a": 1 }`},
		{`{"amount":100}`, `{"amount":1e2}`},
		{`{"amount":100}`, `{"amount":101}`},
		{`{"a":"x"}`, `{"a":"\u0078"}`},
		{`{"a":"x"}`, `{"a":"X"}`},
		{`[1,2]`, `[2,1]`},
		{`{"a":{}}`, `{"a":[]}`},
		{`{"a":null}`, `{}`},
		{`-0`, `0`},
		{`{"a":9007199254740993}`, `{"a":9007199254740992}`},
		{`{"a":0.30000000000000001}`, `{"a":0.3}`},
		{`{"a":1e-400}`, `{"a":0}`},
		{`{"a":0.1}`, `{"a":1e-1}`},
		{`{"a":1.0}`, `{"a":1}`},
		{`{"a":0.30000000000000004}`, `{"a":0.3}`},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, err := Canonical([]byte(a))
		if err != nil {
			return
		}
		cb, err := Canonical([]byte(b))
		if err != nil {
			return
		}
		va, vb := decodeExact(t, a), decodeExact(t, b)
		same := exactEqual(va, vb)
		if got := Fingerprint("POST", "POST /v1/x", ca) == Fingerprint("POST", "POST /v1/x", cb); got != same {
			t.Fatalf("bodies %q and %q: equal fingerprints %v, equal values %v", a, b, got, same)
		}
		if Fingerprint("POST", "POST /v1/x", ca) == Fingerprint("POST", "POST /v1/y", ca) {
			t.Fatalf("the route does not change the fingerprint of %q", a)
		}
	})
}

// decodeExact decodes a document Canonical accepted, keeping its numbers as
// written.
func decodeExact(t *testing.T, doc string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("Canonical accepted %q, which does not decode: %v", doc, err)
	}
	return v
}

// exactEqual reports whether two decoded documents are equal, comparing
// numbers by their exact values.
func exactEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, oka := exactNumber(a.String())
		rb, okb := exactNumber(b.String())
		return oka && okb && ra.Cmp(rb) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			w, ok := b[k]
			if !ok || !exactEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !exactEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// exactNumber is the exact value of a JSON number. big.Rat cannot hold an
// exponent past int64's range, which Canonical accepts on a zero (0E10000000000000000000
// is 0): a mantissa of zeros is 0 whatever its exponent.
func exactNumber(s string) (*big.Rat, bool) {
	if r, ok := new(big.Rat).SetString(s); ok {
		return r, true
	}
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	if strings.Trim(mantissa, "-0.") == "" {
		return new(big.Rat), true
	}
	return nil, false
}

// BenchmarkCanonical measures the canonical form of request bodies: a
// typical payment and one dense with numbers, long enough to need the exact
// comparison.
func BenchmarkCanonical(b *testing.B) {
	bodies := map[string]string{
		"payment": `{"amount": 2000, "currency": "usd", "customer": "cus_123", "source": "tok_visa", "description": "Order 1234",
			"metadata": {"order": "1234", "channel": "web", "campaign": "spring"}}`,
		"numbers": `{"values": [0.1, 1.5, 2.25, 1e3, 12345, 3.141592653589793, 2.718281828459045, 9007199254740991, 0.30000000000000004, -17.5,
			100, 250, 3000, 1.0, 6.02214076e23, 1.602176634e-19, 42, 7, 0, -1]}`,
	}
	for name, body := range bodies {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := Canonical([]byte(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFingerprint measures the fingerprint of the harness's payment.
func BenchmarkFingerprint(b *testing.B) {
	body := []byte(`{"amount":1234,"currency":"usd","customer":"cus_1"}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = fingerprintAt("POST", "POST /v1/payments", "", body)
	}
}
