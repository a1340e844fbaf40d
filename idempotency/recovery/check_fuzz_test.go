package recovery_test

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/recovery"
)

// FuzzDecodeCheck checks the check messages read from SQS: DecodeCheck never
// panics; a message it accepts names a record whose key parses, a lease
// token and a deadline, and re-encodes (Encode) to a message that decodes
// to the same check and encodes the same again; and every check a Scheduler
// would send (a key of a tenant the rule accepts, a lease token, a
// deadline) decodes from its Encode to itself.
func FuzzDecodeCheck(f *testing.F) {
	hash := idempotency.NewKey("acme", "abc").Hash
	for _, body := range []string{
		`{"record":"acme#` + hash + `","route":"POST /v1/payments","lease_token":"t1","deadline":"2026-11-25T16:00:00.123456789Z"}`,
		`{"record":"a#b#` + hash + `","route":"","lease_token":"t1","deadline":"2026-11-25T17:00:00+01:00"}`,
		`{"record":"acme#` + hash + `","lease_token":"t1","deadline":"0001-01-01T00:00:00Z"}`,
		`{"record":"acme","lease_token":"t1","deadline":"2026-11-25T16:00:00Z"}`,
		`{"record":"acme#` + hash + `","lease_token":"","deadline":"2026-11-25T16:00:00Z"}`,
		`{"record":"acme#` + hash + `","lease_token":"t1","deadline":"yesterday"}`,
		`{"record":"acme#` + hash + `","lease_token":"t1","deadline":"9999-12-31T23:59:59-23:59"}`,
		`{"RECORD":"acme#` + hash + `","Lease_Token":"t1","deadline":"2026-11-25T16:00:00Z","extra":1}`,
		`{"record":"acme#x","record":"acme#y","lease_token":"t1","deadline":"2026-11-25T16:00:00Z"}`,
		`{"record":1}`, `[]`, `null`, `{}`, `{`, ``, "\xff",
	} {
		f.Add(body, "acme", "abc", "POST /v1/payments", "t1", int64(1_764_086_400_123_456_789))
	}
	f.Fuzz(func(t *testing.T, body, tenant, raw, route, token string, deadline int64) {
		if c, err := recovery.DecodeCheck(body); err == nil {
			if _, err := c.Key(); err != nil || c.LeaseToken == "" || c.Deadline.IsZero() {
				t.Fatalf("DecodeCheck(%q) = %+v, want a record ID, a lease token and a deadline", body, c)
			}
			enc := c.Encode()
			again, err := recovery.DecodeCheck(enc)
			if err != nil || again.Record != c.Record || again.Route != c.Route || again.LeaseToken != c.LeaseToken || !again.Deadline.Equal(c.Deadline) {
				t.Fatalf("DecodeCheck(%q) of the Encode of DecodeCheck(%q) = %+v, %v; want %+v", enc, body, again, err, c)
			}
			if again.Encode() != enc {
				t.Fatalf("Encode of %q decoded = %q, want itself", enc, again.Encode())
			}
		}
		if idempotency.ValidateTenant(tenant) != nil || token == "" || deadline == 0 {
			return
		}
		c := recovery.Check{Record: idempotency.NewKey(tenant, raw).ID(), Route: route, LeaseToken: token, Deadline: time.Unix(0, deadline).UTC()}
		got, err := recovery.DecodeCheck(c.Encode())
		if err != nil {
			t.Fatalf("DecodeCheck(%q) error = %v", c.Encode(), err)
		}
		if k, _ := got.Key(); k != idempotency.NewKey(tenant, raw) || got.LeaseToken != token && utf8.ValidString(token) ||
			got.Route != route && utf8.ValidString(route) || !got.Deadline.Equal(c.Deadline) {
			t.Fatalf("DecodeCheck(%q) = %+v, want %+v", c.Encode(), got, c)
		}
	})
}
