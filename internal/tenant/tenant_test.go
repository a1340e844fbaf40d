package tenant

import (
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
)

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"acme": true, "0": true, "a_b-c9": true, strings.Repeat("a", 64): true,
		"": false, "Acme": false, "_a": false, "a b": false, "a#b": false, strings.Repeat("a", 65): false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestValidWithinPublicRule: every tenant the demo's authorizer issues
// (Valid) passes the public middleware's tenant rule
// (idempotency.ValidateTenant), which is wider.
func TestValidWithinPublicRule(t *testing.T) {
	for c := range 256 {
		for _, s := range []string{string(rune(c)), "a" + string([]byte{byte(c)}), "a" + strings.Repeat(string([]byte{byte(c)}), 63)} {
			if Valid(s) {
				if err := idempotency.ValidateTenant(s); err != nil {
					t.Errorf("Valid(%q), but ValidateTenant(%q) = %v", s, s, err)
				}
			}
		}
	}
}
