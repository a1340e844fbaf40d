package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/oncehq/once/internal/tenant"
)

// DefaultDevAPIKeys is the devstack's ONCE_DEV_API_KEYS when it is unset.
const DefaultDevAPIKeys = "acme:sk_test_acme,globex:sk_test_globex"

// Hash returns the form in which apiKey is stored: the lower-case hex SHA-256
// of the key.
func Hash(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// ShortHash returns the first 8 hex digits of Hash(apiKey): enough to tell
// keys apart in logs, useless to an attacker.
func ShortHash(apiKey string) string { return Hash(apiKey)[:8] }

// Pair is an API key and the tenant it authenticates.
type Pair struct {
	Tenant string
	Key    string
}

// ParsePairs parses a list of API keys in the ONCE_DEV_API_KEYS format,
// "tenant:key,tenant:key,...". Spaces around entries, tenants and keys are
// ignored. Tenants must be valid tenant ids; keys must be non-empty printable
// ASCII without spaces or commas; a key may not appear twice. Errors name the
// entry by position and tenant, never the key.
func ParsePairs(s string) ([]Pair, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("auth: no API keys: want tenant:key[,tenant:key...]")
	}
	var (
		pairs []Pair
		errs  []error
		seen  = map[string]int{}
	)
	for i, entry := range strings.Split(s, ",") {
		n := i + 1
		entry = strings.TrimSpace(entry)
		name, key, ok := strings.Cut(entry, ":")
		name, key = strings.TrimSpace(name), strings.TrimSpace(key)
		switch {
		case entry == "":
			errs = append(errs, fmt.Errorf("auth: API key entry %d is empty", n))
			continue
		case !ok:
			errs = append(errs, fmt.Errorf("auth: API key entry %d: want tenant:key, found no ':'", n))
			continue
		}
		if !tenant.Valid(name) {
			errs = append(errs, fmt.Errorf("auth: API key entry %d: tenant %q is not a tenant id (%s)", n, name, tenant.Pattern))
		}
		if err := checkKey(key); err != nil {
			errs = append(errs, fmt.Errorf("auth: API key entry %d (tenant %q): %w", n, name, err))
			continue
		}
		if prev, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("auth: API key entry %d (tenant %q): same key as entry %d", n, name, prev))
			continue
		}
		seen[key] = n
		pairs = append(pairs, Pair{Tenant: name, Key: key})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pairs, nil
}

// checkKey enforces what a key must be to travel in "Authorization: Bearer
// <key>" and in ONCE_DEV_API_KEYS.
func checkKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	for _, c := range []byte(key) {
		if c <= ' ' || c >= 0x7f || c == ',' {
			return errors.New("key must be printable ASCII without spaces or commas")
		}
	}
	return nil
}
