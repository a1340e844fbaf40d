// Package tenant holds the rule for tenant ids, which the authorizer applies
// to the tenants it maps API keys to and the background functions apply to
// the tenants of the items and messages they read, without linking the
// authorizer.
package tenant

import "regexp"

// Pattern is the rule for tenant ids, as a regular expression. Every id it
// allows passes idempotency.ValidateTenant, the public middleware's wider
// rule.
const Pattern = `^[a-z0-9][a-z0-9_-]{0,63}$`

var id = regexp.MustCompile(Pattern)

// Valid reports whether s is a valid tenant id (matches Pattern).
func Valid(s string) bool { return id.MatchString(s) }
