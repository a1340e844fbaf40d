package idempotency

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{"bare token", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"sf-string", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"sf-string with escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"surrounding spaces", []string{"  abc "}, "abc", nil},
		{"punctuation", []string{"!#$%&'*+-.^_`|~:/"}, "!#$%&'*+-.^_`|~:/", nil},
		{"max length", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{"missing", nil, "", ErrKeyMissing},
		{"repeated", []string{"a", "b"}, "", ErrKeyInvalid},
		{"empty", []string{""}, "", ErrKeyInvalid},
		{"empty sf-string", []string{`""`}, "", ErrKeyInvalid},
		{"too long", []string{strings.Repeat("k", 256)}, "", ErrKeyInvalid},
		{"too long sf-string", []string{`"` + strings.Repeat("k", 256) + `"`}, "", ErrKeyInvalid},
		{"inner space", []string{"a b"}, "", ErrKeyInvalid},
		{"space in sf-string", []string{`"a b"`}, "", ErrKeyInvalid},
		{"non-ASCII", []string{"clé"}, "", ErrKeyInvalid},
		{"control character", []string{"a\x01b"}, "", ErrKeyInvalid},
		{"unterminated sf-string", []string{`"abc`}, "", ErrKeyInvalid},
		{"sf-string with parameters", []string{`"abc";a=1`}, "", ErrKeyInvalid},
		{"sf-integer", []string{`"1`}, "", ErrKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.values)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseKey(%q) error = %v, want %v", tt.values, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseKey(%q) = %q, want %q", tt.values, got, tt.want)
			}
		})
	}
}

func TestKeyScoping(t *testing.T) {
	a, b := NewKey("acme", "k1"), NewKey("globex", "k1")
	if a.ID() == b.ID() || a.Forward("fp") == b.Forward("fp") {
		t.Errorf("same raw key in two tenants shares an identity: %v %v", a, b)
	}
	if strings.Contains(a.ID(), "k1") || strings.Contains(a.Forward("fp"), "k1") || strings.Contains(a.Forward("fp"), "acme") {
		t.Errorf("raw key or tenant leaks into ID %q or Forward %q", a.ID(), a.Forward("fp"))
	}
	if a.Forward("fp") != NewKey("acme", "k1").Forward("fp") {
		t.Errorf("Forward is not deterministic")
	}
	if a.Forward("fp1") == a.Forward("fp2") {
		t.Errorf("Forward(%q) = Forward(%q): a key reused with another request names the same operation", "fp1", "fp2")
	}
	if rec := (Record{Key: a, Fingerprint: "fp"}); rec.ForwardKey() != a.Forward("fp") {
		t.Errorf("Record.ForwardKey() = %q, want Key.Forward(fingerprint) %q", rec.ForwardKey(), a.Forward("fp"))
	}
	if a != NewKey("acme", "k1") {
		t.Errorf("NewKey is not deterministic")
	}
	got, err := ParseID(a.ID())
	if err != nil || got != a {
		t.Errorf("ParseID(%q) = %v, %v, want %v", a.ID(), got, err, a)
	}
	if len(a.Short()) != 12 {
		t.Errorf("Short() = %q, want 12 characters", a.Short())
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "", `""`, `"abc";x=1`, strings.Repeat("z", 256), "a b", "\x7f", `"\u00e9"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			if !errors.Is(err, ErrKeyInvalid) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrKeyInvalid", v, err)
			}
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d out of range", v, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x out of range", v, key, key[i])
			}
		}
		// A bare token parses to itself; quoting it as an sf-string gives the same key.
		if !strings.HasPrefix(strings.TrimSpace(v), `"`) && !strings.ContainsAny(key, `"\`) {
			if again, err := ParseKey([]string{`"` + key + `"`}); err != nil || again != key {
				t.Fatalf("quoted %q = %q, %v; want %q", key, again, err, key)
			}
		}
	})
}

// FuzzParseID checks that ParseID is the inverse of Key.ID: the ID of a key
// of any tenant the rule accepts (ValidateTenant) parses back to that key,
// and every ID ParseID accepts is a non-empty tenant and a hash without '#'
// whose ID is the input itself.
func FuzzParseID(f *testing.F) {
	hash := NewKey("acme", "abc").Hash
	for _, s := range []string{
		"acme#" + hash, "a#b#" + hash, "Acme Corp#x", "Société Générale – 東京", "acme", "#" + hash, "acme#", "#", "##", "",
		"arn:aws:sts::123456789012:assumed-role/r/s", "\x00#\xff", strings.Repeat("t", MaxTenantLength+1),
	} {
		f.Add(s, "abc")
	}
	f.Fuzz(func(t *testing.T, s, raw string) {
		if k, err := ParseID(s); err == nil {
			if k.Tenant == "" || k.Hash == "" || strings.Contains(k.Hash, "#") || k.ID() != s {
				t.Fatalf("ParseID(%q) = %+v, ID %q; want a tenant and a hash whose ID is the input", s, k, k.ID())
			}
		} else if k != (Key{}) {
			t.Fatalf("ParseID(%q) = %+v, %v; want no key with the error", s, k, err)
		}
		// s as a tenant.
		if ValidateTenant(s) != nil {
			return
		}
		k := NewKey(s, raw)
		if got, err := ParseID(k.ID()); err != nil || got != k {
			t.Fatalf("ParseID(%q) = %+v, %v; want %+v", k.ID(), got, err, k)
		}
	})
}
