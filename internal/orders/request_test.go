package orders

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/jsonbody/jsonbodytest"
)

// orderFields are the parameters of a create-order request.
var orderFields = []string{"amount", "currency", "customer", "source", "email", "description", "metadata"}

// FuzzDecodeOrder checks that Decode never panics; that it refuses a body
// only with a *problem.FieldError answered as 400 and naming the field; that
// every body it accepts can be fingerprinted and decodes as its canonical
// form does (the stored request the reconciler rebuilds from); that every
// request it accepts re-encodes to a body that decodes to the same request;
// and that every e-mail address it accepts keeps the documented rule.
func FuzzDecodeOrder(f *testing.F) {
	for _, seed := range []string{
		`{"amount":2500,"currency":"eur","customer":"cus_42","source":"tok_visa","email":"a@b.co"}`,
		`{"amount":1,"currency":"USD","customer":"c","description":"d","metadata":{"a":"b"},"source":"tok_visa","email":"x.y+z@ex-ample.com"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a\u0040b.co"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a@b..co"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":null,"email":"a@b.co"}`,
		`{"amount":1,"currency":"usd","customer":"c","email":"a@b.co"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"Name <a@b.co>"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a@b.co","email":"c@d.co"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a@b.co","x":1}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"\"a b\"@b.co"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a@[127.0.0.1]"}`,
		`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","email":"a@1.23"}`,
		`[]`, `null`, `{`, "", "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Decode(body)
		if err != nil {
			jsonbodytest.CheckRefusal(t, body, err, orderFields)
			return
		}
		if why := emailRule(req.Email); why != "" {
			t.Fatalf("Decode(%q) accepted the e-mail address %q: %s", body, req.Email, why)
		}
		if req.Source == "" {
			t.Fatalf("Decode(%q) accepted a request without a source", body)
		}
		jsonbodytest.CheckRoundTrips(t, body, req, Decode)
	})
}

// FuzzDecodeEmail checks DecodeEmail against its documented rule, written
// out again here (emailRule): every address it accepts keeps the rule and
// decodes to itself; every plain address (simpleEmail) that keeps the rule
// is accepted; every refusal is a *problem.FieldError naming the field.
func FuzzDecodeEmail(f *testing.F) {
	for _, seed := range []string{
		"a@b.co", "first.last+tag@sub.example-domain.com", "A_B-c@EXAMPLE.ORG", "a@b.c1",
		"a@b", "a@b.", "a@.b.co", "a@b..co", "a@-b.co", "a@b-.co", "a@b.123", "a@1.2.3.4", "a@[127.0.0.1]",
		"@b.co", "a@", "a", "a@@b.co", "a.@b.co", ".a@b.co", "a..b@b.co", `"a"@b.co`, `"a@b"@c.co`, `"a b"@c.co`,
		"a(c)@b.co", "Name <a@b.co>", "<a@b.co>", " a@b.co", "a@b.co ", "a@b.co\n", "é@b.co", "a@bé.co",
		strings.Repeat("a", 64) + "@b.co", strings.Repeat("a", 65) + "@b.co",
		"a@" + strings.Repeat("b", 63) + ".co", "a@" + strings.Repeat("b", 64) + ".co",
		"a@" + strings.Repeat(strings.Repeat("b", 62)+".", 4) + "co",
		strings.Repeat("a", 64) + "@" + strings.Repeat(strings.Repeat("b", 61)+".", 3) + "co",
		"\x00@b.co", "a@b.co\x7f", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal(%q) error = %v", s, err)
		}
		got, err := DecodeEmail("email", raw)
		why := emailRule(s)
		if err != nil {
			jsonbodytest.CheckRefusal(t, raw, err, []string{"email"})
			if why == "" && simpleEmail(s) {
				t.Fatalf("DecodeEmail(%s) refused a plain address that keeps the rule: %v", raw, err)
			}
			return
		}
		if why != "" {
			t.Fatalf("DecodeEmail(%s) = %q, accepted an address outside the rule: %s", raw, got, why)
		}
		if got != s {
			t.Fatalf("DecodeEmail(%s) = %q, want %q", raw, got, s)
		}
	})
}

// emailRule says why s breaks DecodeEmail's documented rule (a bare
// addr-spec of printable ASCII, at most MaxEmailLength characters, a local
// part of at most 64, a domain that is a host name of at least two labels of
// letters, digits and inner hyphens, with a top-level label not all digits),
// or "" when it keeps it.
func emailRule(s string) string {
	if len(s) > MaxEmailLength {
		return "longer than MaxEmailLength"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return "not printable ASCII"
		}
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return "no @"
	}
	local, domain := s[:at], s[at+1:]
	if len(local) < 1 || len(local) > 64 {
		return "local part not 1 to 64 characters"
	}
	if strings.ContainsAny(local, "<>()[]\\,;: ") && !strings.HasPrefix(local, `"`) {
		return "local part holds a special character outside quotes"
	}
	if len(domain) > 253 {
		return "domain longer than 253"
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "domain of one label"
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return "domain label empty, longer than 63 or with an outer hyphen"
		}
		if strings.Trim(strings.ToLower(l), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return "domain label not letters, digits and hyphens"
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "top-level label all digits"
	}
	return ""
}

// simpleEmail reports whether s's local part is a plain dot-atom: letters,
// digits and +_- in dot-separated runs, the kind of address every mail
// system takes, which DecodeEmail must accept when it keeps the rule.
func simpleEmail(s string) bool {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return false
	}
	for _, run := range strings.Split(s[:at], ".") {
		if run == "" || strings.Trim(strings.ToLower(run), "abcdefghijklmnopqrstuvwxyz0123456789+_-") != "" {
			return false
		}
	}
	return true
}
