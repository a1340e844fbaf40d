package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/oncehq/once/idempotency/problem"
)

// MaxTenantLength is the longest accepted tenant, in bytes: 1024, half of
// DynamoDB's 2048-byte partition key. A store derives its keys from Key.ID
// (the tenant, '#' and the key's 64-hex-digit hash: at most 1089 bytes) and
// may append suffixes. The DynamoDB store's longest are a chunk item's,
// "#chunk#", a 16-hex-digit id, '#' and a one-digit index (25 bytes: 1114
// in all), and a restore mark's, "#restored#" and the stream event's ID (10
// bytes and 32 for DynamoDB Streams' IDs: 1131 in all); that leaves over
// 900 bytes of margin for any suffix a store adds later. An assumed-role
// ARN (about 170 bytes) or an e-mail address fits many times over.
const MaxTenantLength = 1024

// ValidateTenant applies the tenant rule: a tenant is 1 to MaxTenantLength
// bytes of valid UTF-8 holding no control character (C0, DEL or C1:
// U+0000-U+001F, U+007F-U+009F), no bidirectional control (Unicode's
// Bidi_Control: U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and
// no '#'. Anything else is allowed:
// spaces, punctuation, any printable Unicode ("Ünïcode Org", an ARN, an
// e-mail address). '#' separates the tenant from the key hash in Key.ID,
// and from the suffixes a store adds to it (the DynamoDB store's chunk and
// restore-mark items), so a tenant holding it could name another tenant's
// items; control characters and invalid UTF-8 corrupt log lines and
// terminals, and a bidirectional control reorders the text displayed after
// it (a tenant ending in U+202E shows the key or fields that follow it
// reversed, in a log viewer or a console); the length keeps every key a store derives from it under
// DynamoDB's 2048-byte partition key (MaxTenantLength). It returns nil for
// a valid tenant, else a *TenantError, which matches ErrTenantInvalid. The
// Middleware applies it to what Config.Tenant returns before anything is
// read or written.
func ValidateTenant(tenant string) error {
	switch {
	case tenant == "":
		return newTenantError(tenant, "it is empty")
	case len(tenant) > MaxTenantLength:
		return newTenantError(tenant, fmt.Sprintf("it is longer than %d bytes", MaxTenantLength))
	}
	for i, c := range tenant {
		switch {
		case c == utf8.RuneError && !validRuneAt(tenant, i):
			return newTenantError(tenant, fmt.Sprintf("byte %d is not valid UTF-8", i+1))
		case c == '#':
			return newTenantError(tenant, fmt.Sprintf("byte %d is '#'", i+1))
		case unicode.IsControl(c):
			return newTenantError(tenant, fmt.Sprintf("byte %d starts a control character (%U)", i+1, c))
		case unicode.Is(unicode.Bidi_Control, c):
			return newTenantError(tenant, fmt.Sprintf("byte %d starts a bidirectional control (%U)", i+1, c))
		}
	}
	return nil
}

// validRuneAt reports whether s holds a valid encoding at byte i (a
// U+FFFD written out, rather than a decoding error).
func validRuneAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size > 1
}

// tenantRule says what a valid tenant is, for problem details (1024 is
// MaxTenantLength).
const tenantRule = "a tenant is 1 to 1024 bytes of UTF-8 text, with no control characters, no bidirectional controls and no '#'"

// TenantError reports a tenant outside the tenant rule (ValidateTenant). It
// matches ErrTenantInvalid. Neither it nor its text, for the operator's log
// line, holds any of the tenant's bytes (a refused tenant may be a display
// name or an e-mail address): only its length and a prefix of its SHA-256,
// to tell tenants apart and to match a suspect tenant against.
type TenantError struct {
	// Reason says what is wrong, as a sentence fragment ("byte 5 is '#'").
	Reason string
	// Len is the tenant's length in bytes.
	Len int
	// Hash is the first 12 hex digits of the tenant's SHA-256.
	Hash string
}

func newTenantError(tenant, reason string) *TenantError {
	sum := sha256.Sum256([]byte(tenant))
	return &TenantError{Reason: reason, Len: len(tenant), Hash: hex.EncodeToString(sum[:6])}
}

// Error describes the problem, with the tenant's length and hash prefix.
func (e *TenantError) Error() string {
	return fmt.Sprintf("idempotency: the tenant is invalid: %s (tenant of %d bytes, sha256 %s)", e.Reason, e.Len, e.Hash)
}

// Is makes errors.Is(err, ErrTenantInvalid) true.
func (e *TenantError) Is(target error) bool { return target == ErrTenantInvalid }

// Problem answers 403 tenant_invalid, naming no tenant.
func (e *TenantError) Problem() problem.Details { return ErrTenantInvalid.Problem() }
