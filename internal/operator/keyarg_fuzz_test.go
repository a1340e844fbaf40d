package operator

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
)

// FuzzKeyArg checks how oncectl reads the record a command is about
// (keyArg): it never panics and refuses only with a usage error; a record
// ID it accepts is a tenant and a lower-case hex SHA-256 whose ID is the
// argument itself; a -tenant and -key it accepts are a tenant of the rule
// and the key the API parses from the header, hashed; and the ID of a key
// read from -tenant and -key reads back, as the one argument, as that key.
func FuzzKeyArg(f *testing.F) {
	hash := idempotency.NewKey("acme", "abc").Hash
	for _, seed := range []struct {
		arg, tenant, raw string
		useArg           bool
	}{
		{"acme#" + hash, "", "", true},
		{"a#b#" + hash, "", "", true},
		{"Acme Corp#" + hash, "", "", true},
		{"acme#" + strings.ToUpper(hash), "", "", true},
		{"acme#" + hash[:63] + "g", "", "", true},
		{"acme#" + hash[:63], "", "", true},
		{"#" + hash, "", "", true},
		{"acme#", "", "", true},
		{"acme", "", "", true},
		{"-tenant", "", "", true},
		{"", "acme", "abc", false},
		{"", "acme", `"a\"b\\c"`, false},
		{"", "acme", ` abc	`, false},
		{"", "Société Générale – 東京", "abc", false},
		{"", "acme#x", "abc", false},
		{"", "acme", `"abc`, false},
		{"", "acme", "a b", false},
		{"", "", "abc", false},
		{"acme#" + hash, "acme", "abc", true},
	} {
		f.Add(seed.arg, seed.tenant, seed.raw, seed.useArg)
	}
	f.Fuzz(func(t *testing.T, arg, tenant, raw string, useArg bool) {
		fs := flag.NewFlagSet("show", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		args := []string{}
		if useArg {
			args = []string{"--", arg}
		}
		if err := fs.Parse(args); err != nil {
			t.Fatalf("Parse(%q) error = %v", args, err)
		}
		key, err := keyArg(fs, tenant, raw)
		if err != nil {
			var uerr usageError
			if !errors.As(err, &uerr) || key != (idempotency.Key{}) {
				t.Fatalf("keyArg(%q, %q, %q) = %v, %v (%T); want a usage error only", args, tenant, raw, key, err, err)
			}
			return
		}
		if !keyHash.MatchString(key.Hash) || key.Tenant == "" {
			t.Fatalf("keyArg(%q, %q, %q) = %+v: not a tenant and a SHA-256", args, tenant, raw, key)
		}
		if useArg {
			if key.ID() != arg {
				t.Fatalf("keyArg(%q) = %+v, ID %q; want the argument", arg, key, key.ID())
			}
			return
		}
		parsed, err := idempotency.ParseKey([]string{raw})
		if err != nil || idempotency.ValidateTenant(tenant) != nil {
			t.Fatalf("keyArg(-tenant %q -key %q) = %+v, but the API refuses them (%v)", tenant, raw, key, err)
		}
		if want := idempotency.NewKey(tenant, parsed); key != want {
			t.Fatalf("keyArg(-tenant %q -key %q) = %+v, want %+v", tenant, raw, key, want)
		}
		byID := flag.NewFlagSet("show", flag.ContinueOnError)
		if err := byID.Parse([]string{"--", key.ID()}); err != nil {
			t.Fatalf("Parse(%q) error = %v", key.ID(), err)
		}
		if again, err := keyArg(byID, "", ""); err != nil || again != key {
			t.Fatalf("keyArg(%q), the ID of -tenant %q -key %q, = %+v, %v; want %+v", key.ID(), tenant, raw, again, err, key)
		}
	})
}
