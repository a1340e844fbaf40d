package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/oncehq/once/idempotency/problem"
)

// MaxTenantLength is the longest accepted tenant, in bytes.
const MaxTenantLength = 128

// ValidateTenant applies the tenant rule: a tenant is 1 to MaxTenantLength
// bytes, each printable ASCII other than space and '#' (0x21-0x7E but
// 0x23). '#' separates the tenant from the key hash in Key.ID, and from
// the suffixes a store adds to it (the DynamoDB store's chunk items); the
// length keeps every key a store derives from it well under DynamoDB's
// 2048-byte partition key. It returns nil for a valid tenant, else a
// *TenantError, which matches ErrTenantInvalid. The Middleware applies it to
// what Config.Tenant returns before anything is read or written.
func ValidateTenant(tenant string) error {
	switch {
	case tenant == "":
		return newTenantError(tenant, "it is empty")
	case len(tenant) > MaxTenantLength:
		return newTenantError(tenant, fmt.Sprintf("it is longer than %d bytes", MaxTenantLength))
	}
	for i := 0; i < len(tenant); i++ {
		switch c := tenant[i]; {
		case c == '#':
			return newTenantError(tenant, fmt.Sprintf("byte %d is '#'", i+1))
		case c < 0x21 || c > 0x7e:
			return newTenantError(tenant, fmt.Sprintf("byte %d is outside 0x21-0x7E", i+1))
		}
	}
	return nil
}

// tenantRule says what a valid tenant is, for problem details.
const tenantRule = "a tenant is 1 to 128 printable ASCII characters, no space and no '#'"

// TenantError reports a tenant outside the tenant rule (ValidateTenant). It
// matches ErrTenantInvalid. Its text, for the operator's log line, never
// holds the tenant whole: at most its first tenantShown bytes, quoted, with
// its length and a hash prefix to tell tenants apart.
type TenantError struct {
	// Reason says what is wrong, as a sentence fragment ("byte 5 is '#'").
	Reason string
	// Len is the tenant's length in bytes.
	Len int
	// Prefix is the tenant's first bytes (at most 32).
	Prefix string
	// Hash is the first 12 hex digits of the tenant's SHA-256.
	Hash string
}

// tenantShown is how many of an invalid tenant's bytes a TenantError keeps.
const tenantShown = 32

func newTenantError(tenant, reason string) *TenantError {
	sum := sha256.Sum256([]byte(tenant))
	return &TenantError{Reason: reason, Len: len(tenant), Prefix: tenant[:min(len(tenant), tenantShown)], Hash: hex.EncodeToString(sum[:6])}
}

// Error describes the problem, with the tenant's prefix quoted (control
// characters escaped).
func (e *TenantError) Error() string {
	more := ""
	if e.Len > len(e.Prefix) {
		more = "..."
	}
	return fmt.Sprintf("idempotency: the tenant is invalid: %s (tenant %q%s, %d bytes, sha256 %s)", e.Reason, e.Prefix, more, e.Len, e.Hash)
}

// Is makes errors.Is(err, ErrTenantInvalid) true.
func (e *TenantError) Is(target error) bool { return target == ErrTenantInvalid }

// Problem answers 403 tenant_invalid, naming no tenant.
func (e *TenantError) Problem() problem.Details { return ErrTenantInvalid.Problem() }
