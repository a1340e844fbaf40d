package operator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
)

// TestKeyArgAsTheHeader: -key takes the Idempotency-Key header's value as the
// client sent it, parsed as the API parses it: a bare token and the same key
// as a structured-field string find the one record the API stored for both.
// A -key the API refuses, or a -tenant outside the tenant rule, is a usage
// error (exit 2), for every command that reads a record.
func TestKeyArgAsTheHeader(t *testing.T) {
	e := newEnv(t)
	plain := e.record(t, "acme", "abc", idempotency.StatusUnknown, time.Minute)
	escaped := e.record(t, "acme", `a"b\c`, idempotency.StatusUnknown, time.Minute)
	for _, tt := range []struct {
		key  string
		want idempotency.Record
	}{
		{"abc", plain},
		{`"abc"`, plain},
		{" abc\t", plain},
		{`"a\"b\\c"`, escaped},
		{`a"b\c`, escaped},
	} {
		t.Run(tt.key, func(t *testing.T) {
			code, out, errOut := e.run(t, "show", "-tenant", "acme", "-key", tt.key)
			if code != 0 {
				t.Fatalf("show -key %q = exit %d %q, want 0", tt.key, code, errOut)
			}
			var v struct{ Record string }
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Record != tt.want.Key.ID() {
				t.Errorf("show -key %q = record %q (%v), want %q", tt.key, v.Record, err, tt.want.Key.ID())
			}
		})
	}
	// Tenants the widened rule accepts: show -tenant finds their record.
	longest := strings.Repeat("é", idempotency.MaxTenantLength/2)
	for _, tenant := range []string{"Acme Corp", "Société Générale – 東京", "arn:aws:sts::123456789012:assumed-role/" + strings.Repeat("r", 64) + "/s", longest} {
		rec := e.record(t, tenant, "abc", idempotency.StatusUnknown, time.Minute)
		t.Run("tenant "+tenant[:min(len(tenant), 20)], func(t *testing.T) {
			code, out, errOut := e.run(t, "show", "-tenant", tenant, "-key", "abc")
			var v struct{ Record string }
			if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Record != rec.Key.ID() {
				t.Errorf("show -tenant %.20q = exit %d, record %.40q (%v, %.300q), want 0 and %.40q", tenant, code, v.Record, err, errOut, rec.Key.ID())
			}
		})
	}
	for _, cmd := range []string{"show", "reannounce", "forget"} {
		for _, tt := range []struct{ name, tenant, key, want string }{
			{"unterminated sf-string", "acme", `"abc`, "-key"},
			{"sf-string with parameters", "acme", `"abc";a=1`, "-key"},
			{"empty sf-string", "acme", `""`, "-key"},
			{"inner space", "acme", "a b", "-key"},
			{"non-ASCII key", "acme", "clé", "-key"},
			{"too long key", "acme", strings.Repeat("k", idempotency.MaxKeyLength+1), "-key"},
			{"tenant with hash", "acme#x", "abc", "-tenant"},
			{"tenant with newline", "ac\nme", "abc", "-tenant"},
			{"tenant with C1 control", "acme\u0085", "abc", "-tenant"},
			{"tenant not UTF-8", "acme\xff", "abc", "-tenant"},
			{"tenant one byte too long", longest + "a", "abc", "-tenant"},
			{"too long tenant", strings.Repeat("a", 3000), "abc", "-tenant"},
		} {
			t.Run(cmd+"/"+tt.name, func(t *testing.T) {
				code, out, errOut := e.run(t, cmd, "-tenant", tt.tenant, "-key", tt.key)
				if code != 2 || out != "" || !strings.Contains(errOut, tt.want+": not ") {
					t.Errorf("%s -tenant %.20q -key %.20q = exit %d %q %.300q, want 2 naming %s", cmd, tt.tenant, tt.key, code, out, errOut, tt.want)
				}
				if len(tt.tenant) > 100 && strings.Contains(errOut, tt.tenant) {
					t.Errorf("the usage error repeats the %d-byte tenant", len(tt.tenant))
				}
			})
		}
	}
}
