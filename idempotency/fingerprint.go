package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JCS) canonical form of a JSON document, so
// that key order and insignificant whitespace do not change a fingerprint.
//
// JCS writes every number as the IEEE double it parses to, so two numbers
// that round to the same double would share a fingerprint although a
// handler that decodes them exactly (an int64, a decimal) sees two requests.
// Canonical therefore refuses, with an error matching ErrNumberPrecision, a
// number whose value is not the value JCS writes for it (I-JSON, RFC 7493
// §2.2): 9007199254740993 (2^53 + 1) or 0.30000000000000001, but not 1.0,
// 1e0 or 0.1, which keep their value. Equal documents keep equal canonical
// forms. A body that is not a JSON document is refused with an error matching
// ErrBodyInvalid.
func Canonical(body []byte) ([]byte, error) {
	out, err := jcs.Transform(body)
	if err != nil {
		return nil, fmt.Errorf("idempotency: canonical JSON: %w: %w", ErrBodyInvalid, err)
	}
	if !numbersExact(body) {
		return nil, fmt.Errorf("idempotency: canonical JSON: %w", ErrNumberPrecision)
	}
	return out, nil
}

// Fingerprint is the lower-case hex SHA-256 over method, route and the
// canonical body. The three parts are length-prefixed so that no two distinct
// requests share an encoding.
func Fingerprint(method, route string, canonicalBody []byte) string {
	return fingerprint(canonicalBody, method, route)
}

// fingerprint is the lower-case hex SHA-256 of parts and then body, each
// written as its length in decimal, a colon and itself.
func fingerprint(body []byte, parts ...string) string {
	n := len(body) + 24
	for _, p := range parts {
		n += len(p) + 24
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ':')
	b = append(b, body...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// RequestFingerprint is the fingerprint the middleware gives a request to
// a route without wildcards and without a trailing "/" ("POST /v1/payments"):
// Fingerprint of the body's canonical form, an
// empty body (nothing but whitespace: a POST without one) counting as the
// empty form. Its errors are Canonical's (ErrBodyInvalid, ErrNumberPrecision).
func RequestFingerprint(method, route string, body []byte) (string, error) {
	return requestFingerprint(method, route, "", body)
}

// requestFingerprint is RequestFingerprint with the part of the request's
// path the route does not fix (pathPart).
func requestFingerprint(method, route, path string, body []byte) (string, error) {
	canonical, err := canonicalBody(body)
	if err != nil {
		return "", err
	}
	return fingerprintAt(method, route, path, canonical), nil
}

// canonicalBody is Canonical of a request body, an empty one (nothing but
// whitespace: a POST without a body) having the empty form.
func canonicalBody(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	return Canonical(body)
}

// fingerprintAt is Fingerprint, with path as a fourth length-prefixed part
// when there is one: such a fingerprint differs from every fingerprint
// without one.
func fingerprintAt(method, route, path string, canonical []byte) string {
	if path == "" {
		return Fingerprint(method, route, canonical)
	}
	return fingerprint(canonical, method, route, path)
}

// pathPart is what of r's path a fingerprint on route must cover: nothing
// when route has neither wildcards nor a trailing "/" ("POST /v1/payments": the path is the
// route's); r's escaped path when route ends in "/" (a subtree, "POST
// /v1/notes/" or "/", which matches every path under it, as if it ended in
// an anonymous {...} wildcard); else, for a route with wildcards, their
// values when the standard ServeMux matched r to route as its pattern
// ("POST /v1/payments/{id}/capture": id=pay_1), and r's escaped path when
// something else routed it. So one key sent to two resources of one route
// is two requests, and the fingerprint of a route without either is
// what it always was.
func pathPart(route string, r *http.Request) string {
	subtree := strings.HasSuffix(route, "/")
	if !subtree && !strings.Contains(route, "{") {
		return ""
	}
	if subtree || r.Pattern != route {
		return "path=" + r.URL.EscapedPath()
	}
	var b strings.Builder
	for seg := range strings.SplitSeq(route, "/") {
		name, ok := strings.CutPrefix(seg, "{")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(strings.TrimSuffix(name, "}"), "...")
		if name == "$" {
			continue
		}
		v := r.PathValue(name)
		fmt.Fprintf(&b, "%d:%s%d:%s", len(name), name, len(v), v)
	}
	return b.String()
}

// numbersExact reports whether every number in doc, a JSON document JCS has
// accepted, has the value of the shortest decimal of the double it parses
// to (the number JCS writes).
func numbersExact(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(doc) && isNumberByte(doc[j]) {
				j++
			}
			if !numberExact(doc[i:j]) {
				return false
			}
			i = j - 1
		}
	}
	return true
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'
}

// numberExact reports whether the JSON number lit has the value of the
// shortest decimal of its double. Every decimal of at most 15 significant
// digits in the range of normal doubles does (DBL_DIG), so only longer or
// extreme ones are converted and compared.
func numberExact(lit []byte) bool {
	var buf [24]byte
	digits, exp := decimal(lit, buf[:0])
	if len(digits) == 0 || len(digits) <= 15 && -300 < exp && exp < 300 {
		return true
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	var fbuf [32]byte
	short := strconv.AppendFloat(fbuf[:0], f, 'e', -1, 64)
	var sbuf [24]byte
	sdigits, sexp := decimal(short, sbuf[:0])
	return sexp == exp && bytes.Equal(sdigits, digits)
}

// decimal returns the significant digits of the number lit (no leading or
// trailing zeros; none for zero), appended to buf, and its exponent: lit is
// 0.digits × 10^exp. The sign is ignored: a number and its double share it.
// An exponent beyond ±10^6 is clamped, which keeps it out of the range of
// doubles.
func decimal(lit []byte, buf []byte) (digits []byte, exp int) {
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	point := -1 // digits before the decimal point
	leading := 0
	for ; i < len(lit); i++ {
		c := lit[i]
		if c == '.' {
			point = leading + len(buf)
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		if c == '0' && len(buf) == 0 {
			leading++
			continue
		}
		buf = append(buf, c)
	}
	if point < 0 {
		point = leading + len(buf)
	}
	for len(buf) > 0 && buf[len(buf)-1] == '0' {
		buf = buf[:len(buf)-1]
	}
	if len(buf) == 0 {
		return nil, 0
	}
	e, neg := 0, false
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			neg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			if e < 1_000_000 {
				e = e*10 + int(lit[i]-'0')
			}
		}
	}
	if neg {
		e = -e
	}
	return buf, point - leading + e
}
