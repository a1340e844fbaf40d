package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JCS) canonical form of a JSON document, so
// that key order and insignificant whitespace do not change a fingerprint.
func Canonical(body []byte) ([]byte, error) {
	out, err := jcs.Transform(body)
	if err != nil {
		return nil, fmt.Errorf("idempotency: canonical JSON: %w", err)
	}
	return out, nil
}

// Fingerprint is the lower-case hex SHA-256 over method, route and the
// canonical body. The three parts are length-prefixed so that no two distinct
// requests share an encoding.
func Fingerprint(method, route string, canonicalBody []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(method), []byte(route), canonicalBody} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RequestFingerprint is Fingerprint of the canonical form of a JSON body: the
// fingerprint the middleware gives the request.
func RequestFingerprint(method, route string, body []byte) (string, error) {
	canonical, err := Canonical(body)
	if err != nil {
		return "", err
	}
	return Fingerprint(method, route, canonical), nil
}
