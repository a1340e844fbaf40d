package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
)

// Header is the request header that carries the idempotency key.
const Header = "Idempotency-Key"

// ReplayedHeader marks a replayed response. It is the Middleware's own
// field: one a handler sets is not sent, on the first answer or a replay.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLength is the longest accepted key, in characters, after unquoting.
const MaxKeyLength = 255

// ParseKey returns the idempotency key carried by the header values of one
// request. It accepts an RFC 8941 sf-string ("abc") or a bare token (abc). It
// returns ErrKeyMissing when there is no header and a *KeyError (matching
// ErrKeyInvalid) when the header is repeated, empty, too long or holds a character
// outside 0x21-0x7E.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", &KeyError{Reason: "the header is given more than once"}
	}
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		item, err := httpsfv.UnmarshalItem([]string{v})
		if err != nil {
			return "", &KeyError{Reason: "not a valid structured-field string"}
		}
		s, ok := item.Value.(string)
		if !ok {
			return "", &KeyError{Reason: "not a structured-field string"}
		}
		if len(item.Params.Names()) > 0 {
			return "", &KeyError{Reason: "parameters are not allowed"}
		}
		v = s
	}
	if v == "" {
		return "", &KeyError{Reason: "the key is empty"}
	}
	if len(v) > MaxKeyLength {
		return "", &KeyError{Reason: fmt.Sprintf("the key is longer than %d characters", MaxKeyLength)}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e {
			return "", &KeyError{Reason: fmt.Sprintf("character %d is outside 0x21-0x7E", i+1)}
		}
	}
	return v, nil
}

// Key is an idempotency key scoped to a tenant. The raw key is kept only as a
// SHA-256 hash, so neither storage nor logs ever see it.
type Key struct {
	// Tenant is the caller's tenant, as the authorizer established it.
	Tenant string
	// Hash is the lower-case hex SHA-256 of the raw key.
	Hash string
}

// NewKey scopes the raw key to tenant. It does not check tenant: a tenant
// outside the rule (ValidateTenant) makes a Key whose ID no store should
// keep, and the Middleware never makes one. Check a tenant that did not
// come through the Middleware (an operator's argument) with ValidateTenant
// first.
func NewKey(tenant, raw string) Key {
	sum := sha256.Sum256([]byte(raw))
	return Key{Tenant: tenant, Hash: hex.EncodeToString(sum[:])}
}

// ID is the storage identity of k: tenant and key hash.
func (k Key) ID() string { return k.Tenant + "#" + k.Hash }

// Short is a 12-character prefix of the key hash, for logs.
func (k Key) Short() string {
	if len(k.Hash) < 12 {
		return k.Hash
	}
	return k.Hash[:12]
}

// Forward is the key to send to another system that is idempotent by key (a
// payment provider) for the request with the given fingerprint: stable for
// the scoped key and the request, so that every retry, a late zombie and the
// reconciler all name the same operation there; distinct across tenants and
// across requests, so that a key reused with another request after its
// retention is a new operation at the provider too (not a clash there); and
// revealing neither the tenant nor the raw key.
func (k Key) Forward(fingerprint string) string {
	sum := sha256.Sum256([]byte("once-forward\x00" + k.Tenant + "\x00" + k.Hash + "\x00" + fingerprint))
	return "once_" + hex.EncodeToString(sum[:20])
}

// ParseID is the inverse of Key.ID: the tenant is what precedes the last
// '#'. It does not apply the tenant rule (ValidateTenant), so that a record
// stored before the Middleware applied it, whose tenant may hold '#', can
// still be read, shown and forgotten.
func ParseID(id string) (Key, error) {
	i := strings.LastIndexByte(id, '#')
	if i <= 0 || i == len(id)-1 {
		return Key{}, errors.New("idempotency: malformed record id")
	}
	return Key{Tenant: id[:i], Hash: id[i+1:]}, nil
}
