package tenant

import (
	"strings"
	"testing"
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
