package idempotency

import (
	"encoding/json"
	"reflect"
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

func TestFingerprintUnambiguous(t *testing.T) {
	// Without length prefixes these two would hash the same bytes.
	if Fingerprint("POST", "ab", []byte("c")) == Fingerprint("POST", "a", []byte("bc")) {
		t.Error("Fingerprint does not separate its parts")
	}
}

func TestCanonicalRejectsInvalid(t *testing.T) {
	for _, body := range []string{"", "{", `{"a":}`, "nope"} {
		if _, err := Canonical([]byte(body)); err == nil {
			t.Errorf("Canonical(%q) succeeded, want an error", body)
		}
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
	for _, s := range []string{`{"b":1,"a":[1,2,{"z":null,"y":true}]}`, `{"amount": 1e2}`, `"\u00e9"`, `[]`, `{"a":"\ud83d\ude00"}`, `-0`, `{`} {
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
// exactly when they hold the same value (as IEEE doubles, which is how RFC
// 8785 compares numbers): key order and whitespace never matter, and any
// other difference always does.
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
		var va, vb any
		if json.Unmarshal(ca, &va) != nil || json.Unmarshal(cb, &vb) != nil {
			t.Fatalf("canonical forms %q, %q do not decode", ca, cb)
		}
		same := reflect.DeepEqual(va, vb)
		if got := Fingerprint("POST", "POST /v1/x", ca) == Fingerprint("POST", "POST /v1/x", cb); got != same {
			t.Fatalf("bodies %q and %q: equal fingerprints %v, equal values %v", a, b, got, same)
		}
		if Fingerprint("POST", "POST /v1/x", ca) == Fingerprint("POST", "POST /v1/y", ca) {
			t.Fatalf("the route does not change the fingerprint of %q", a)
		}
	})
}
