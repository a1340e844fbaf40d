package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of a create-payment request.
const (
	MaxAmount            = 99_999_999
	MaxCustomerLength    = 255
	MaxDescriptionLength = 1000
	MaxMetadataKeys      = 20
	MaxMetadataKeyLength = 40
	MaxMetadataValue     = 500
	MaxSourceLength      = 255
	// DefaultSource is the source charged when the request names none.
	DefaultSource = "tok_visa"
	// maxDepth bounds the nesting of a request body; the schema needs 2.
	maxDepth = 32
)

// Request is a validated create-payment request. Its JSON encoding is a body
// that Decode accepts and decodes back to the same Request.
type Request struct {
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"` // lower case
	Customer    string            `json:"customer"`
	Description string            `json:"description,omitempty"` // empty when absent
	Metadata    map[string]string `json:"metadata,omitempty"`    // nil when absent or empty
	Source      string            `json:"source"`                // DefaultSource when absent
}

// ValidationError says which field of a request is wrong and why. Its Reason
// is meant for the client.
type ValidationError struct {
	// Field is the offending field as a dotted path ("amount",
	// "metadata.order"), empty for the body as a whole.
	Field string
	// Reason says what is wrong, in a sentence fragment ("must be at least 1").
	Reason string
}

// Error describes the problem.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "payments: invalid request: " + e.Reason
	}
	return fmt.Sprintf("payments: invalid request: %s: %s", e.Field, e.Reason)
}

// Detail is the sentence shown to the client.
func (e *ValidationError) Detail() string {
	if e.Field == "" {
		return upperFirst(e.Reason) + "."
	}
	return fmt.Sprintf("%s %s.", e.Field, e.Reason)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Decode parses and validates a create-payment request body; a request
// without a source charges DefaultSource. Every failure is a
// *ValidationError.
func Decode(body []byte) (Request, error) { return decode(body, false) }

// DecodeWithSource is Decode for a request that must name its source (a
// charge made at once, POST /v1/charges): a missing or null source is a
// *ValidationError for the field "source", not DefaultSource.
func DecodeWithSource(body []byte) (Request, error) { return decode(body, true) }

func decode(body []byte, sourceRequired bool) (Request, error) {
	if err := checkJSON(body); err != nil {
		return Request{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return Request{}, invalid("", "the body must be a JSON object")
	}
	var req Request
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Request{}, invalid("", "the body is not valid JSON")
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return Request{}, invalid(name, "is not valid JSON")
		}
		seen[name] = true
		var ferr error
		switch name {
		case "amount":
			req.Amount, ferr = decodeAmount(raw)
		case "currency":
			req.Currency, ferr = decodeCurrency(raw)
		case "customer":
			req.Customer, ferr = decodeCustomer(raw)
		case "description":
			req.Description, ferr = decodeDescription(raw)
		case "metadata":
			req.Metadata, ferr = decodeMetadata(raw)
		case "source":
			req.Source, ferr = decodeSource(raw)
		default:
			ferr = invalid(name, "is not a known parameter")
		}
		if ferr != nil {
			return Request{}, ferr
		}
	}
	for _, name := range []string{"amount", "currency", "customer"} {
		if !seen[name] {
			return Request{}, invalid(name, "is required")
		}
	}
	switch {
	case req.Source != "":
	case sourceRequired:
		return Request{}, invalid("source", "is required")
	default:
		req.Source = DefaultSource
	}
	return req, nil
}

// checkJSON checks that body is one well-formed UTF-8 JSON value with no
// duplicate object key at any depth. encoding/json alone would silently keep
// the last of duplicate keys, so that {"amount":1,"amount":100000} could mean
// one thing to a proxy or a log reader and another to us.
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return invalid("", "the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := scanValue(dec, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "the body must hold a single JSON value")
	}
	if loneSurrogate(body) {
		// encoding/json would turn it into U+FFFD; the canonical form that
		// the idempotency fingerprint needs (RFC 8785) refuses it.
		return invalid("", "the body holds a \\u escape of a lone UTF-16 surrogate")
	}
	return nil
}

// loneSurrogate reports whether a string of body, well-formed JSON, holds a
// \u escape of a UTF-16 surrogate that is not part of a pair.
func loneSurrogate(body []byte) bool {
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && body[i+1] == 'u':
			r := hex4(body[i+2 : i+6])
			switch {
			case 0xDC00 <= r && r <= 0xDFFF:
				return true
			case 0xD800 <= r && r <= 0xDBFF:
				if i+12 > len(body) || body[i+6] != '\\' || body[i+7] != 'u' {
					return true
				}
				if lo := hex4(body[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 11
			default:
				i += 5
			}
		case c == '\\':
			i++ // skip the escaped character
		}
	}
	return false
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32) // well-formed JSON: four hex digits
	return rune(n)
}

func scanValue(dec *json.Decoder, path string, depth int) error {
	if depth > maxDepth {
		return invalid(path, "is nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return syntaxError(err)
			}
			key, _ := tok.(string)
			p := key
			if path != "" {
				p = path + "." + key
			}
			if seen[key] {
				return invalid(p, "is given more than once")
			}
			seen[key] = true
			if err := scanValue(dec, p, depth+1); err != nil {
				return err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := scanValue(dec, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return syntaxError(err)
	}
	return nil
}

func syntaxError(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return invalid("", "the body is not valid JSON (at byte %d)", syn.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the body is not valid JSON (unexpected end)")
	}
	return invalid("", "the body is not valid JSON")
}

// kind is a JSON value's type, from its first byte.
func kind(raw json.RawMessage) byte {
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; c {
	case '"', '{', '[', 't', 'f', 'n':
		return c
	}
	return '0' // a number
}

func decodeString(raw json.RawMessage) (string, bool) {
	if kind(raw) != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

func decodeAmount(raw json.RawMessage) (int64, error) {
	if kind(raw) != '0' {
		return 0, invalid("amount", "must be an integer")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	var num *strconv.NumError
	switch {
	case errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange):
		return 0, invalid("amount", "must be at most %d", MaxAmount)
	case err != nil:
		return 0, invalid("amount", "must be an integer")
	case n < 1:
		return 0, invalid("amount", "must be at least 1")
	case n > MaxAmount:
		return 0, invalid("amount", "must be at most %d", MaxAmount)
	}
	return n, nil
}

func decodeCurrency(raw json.RawMessage) (string, error) {
	s, ok := decodeString(raw)
	if !ok {
		return "", invalid("currency", "must be a string")
	}
	c := strings.ToLower(s)
	if !currencies[c] {
		return "", invalid("currency", "must be a three-letter ISO 4217 currency code")
	}
	return c, nil
}

func decodeCustomer(raw json.RawMessage) (string, error) {
	s, ok := decodeString(raw)
	if !ok {
		return "", invalid("customer", "must be a string")
	}
	if n := utf8.RuneCountInString(s); n < 1 || n > MaxCustomerLength {
		return "", invalid("customer", "must be between 1 and %d characters", MaxCustomerLength)
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", invalid("customer", "must not contain control characters")
	}
	return s, nil
}

func decodeDescription(raw json.RawMessage) (string, error) {
	if kind(raw) == 'n' {
		return "", nil
	}
	s, ok := decodeString(raw)
	if !ok {
		return "", invalid("description", "must be a string or null")
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		return "", invalid("description", "must be at most %d characters", MaxDescriptionLength)
	}
	return s, nil
}

func decodeMetadata(raw json.RawMessage) (map[string]string, error) {
	switch kind(raw) {
	case 'n':
		return nil, nil
	case '{':
	default:
		return nil, invalid("metadata", "must be an object of strings or null")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, invalid("metadata", "must be an object of strings or null")
	}
	if len(fields) > MaxMetadataKeys {
		return nil, invalid("metadata", "must have at most %d keys", MaxMetadataKeys)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	// Check keys in sorted order, so that the error named is deterministic.
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	md := make(map[string]string, len(fields))
	for _, k := range keys {
		field := "metadata." + k
		switch n := utf8.RuneCountInString(k); {
		case n == 0:
			return nil, invalid("metadata", "keys must not be empty")
		case n > MaxMetadataKeyLength:
			return nil, invalid(field, "is a key longer than %d characters", MaxMetadataKeyLength)
		}
		if strings.IndexFunc(k, unicode.IsControl) >= 0 {
			return nil, invalid(field, "is a key with control characters")
		}
		v, ok := decodeString(fields[k])
		if !ok {
			return nil, invalid(field, "must be a string")
		}
		if utf8.RuneCountInString(v) > MaxMetadataValue {
			return nil, invalid(field, "must be at most %d characters", MaxMetadataValue)
		}
		md[k] = v
	}
	return md, nil
}

func decodeSource(raw json.RawMessage) (string, error) {
	if kind(raw) == 'n' {
		return "", nil
	}
	s, ok := decodeString(raw)
	if !ok {
		return "", invalid("source", "must be a string or null")
	}
	if len(s) < 1 || len(s) > MaxSourceLength {
		return "", invalid("source", "must be between 1 and %d characters", MaxSourceLength)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return "", invalid("source", "must hold only letters, digits and underscores")
		}
	}
	return s, nil
}
