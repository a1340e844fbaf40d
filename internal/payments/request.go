package payments

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/jsonbody"
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

// Decode parses and validates a create-payment request body; a request
// without a source charges DefaultSource. Every failure is a
// *problem.FieldError naming the field.
func Decode(body []byte) (Request, error) { return decode(body, false) }

// DecodeWithSource is Decode for a request that must name its source (a
// charge made at once, POST /v1/charges): a missing or null source is a
// *problem.FieldError for the field "source", not DefaultSource.
func DecodeWithSource(body []byte) (Request, error) { return decode(body, true) }

func decode(body []byte, sourceRequired bool) (Request, error) {
	var req Request
	err := jsonbody.Object(body, []string{"amount", "currency", "customer"}, func(name string, raw json.RawMessage) error {
		var err error
		switch name {
		case "amount":
			req.Amount, err = DecodeAmount("amount", raw)
		case "currency":
			req.Currency, err = DecodeCurrency("currency", raw)
		case "customer":
			req.Customer, err = DecodeCustomer("customer", raw)
		case "description":
			req.Description, err = DecodeDescription("description", raw)
		case "metadata":
			req.Metadata, err = DecodeMetadata("metadata", raw)
		case "source":
			req.Source, err = DecodeSource("source", raw)
		default:
			err = problem.Invalid(name, "is not a known parameter")
		}
		return err
	})
	if err != nil {
		return Request{}, err
	}
	switch {
	case req.Source != "":
	case sourceRequired:
		return Request{}, problem.Invalid("source", "is required")
	default:
		req.Source = DefaultSource
	}
	return req, nil
}

// DecodeAmount decodes field as a payment amount: an integer of minor units
// from 1 to MaxAmount.
func DecodeAmount(field string, raw json.RawMessage) (int64, error) {
	return jsonbody.Int(field, raw, 1, MaxAmount)
}

// DecodeCurrency decodes field as a currency: a three-letter ISO 4217 code
// of ASCII letters in either case, returned in lower case. (strings.ToLower
// alone would map look-alikes such as U+0130 or the Kelvin sign onto ASCII
// letters.)
func DecodeCurrency(field string, raw json.RawMessage) (string, error) {
	s, ok := jsonbody.String(raw)
	if !ok {
		return "", problem.Invalid(field, "must be a string")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return "", problem.Invalid(field, "must be a three-letter ISO 4217 currency code")
		}
	}
	c := strings.ToLower(s)
	if !currencies[c] {
		return "", problem.Invalid(field, "must be a three-letter ISO 4217 currency code")
	}
	return c, nil
}

// DecodeCustomer decodes field as a customer reference: a string of 1 to
// MaxCustomerLength characters without control characters.
func DecodeCustomer(field string, raw json.RawMessage) (string, error) {
	s, ok := jsonbody.String(raw)
	if !ok {
		return "", problem.Invalid(field, "must be a string")
	}
	if n := utf8.RuneCountInString(s); n < 1 || n > MaxCustomerLength {
		return "", problem.Invalid(field, "must be between 1 and %d characters", MaxCustomerLength)
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "", problem.Invalid(field, "must not contain control characters")
	}
	return s, nil
}

// DecodeDescription decodes field as a description: a string of at most
// MaxDescriptionLength characters, or null ("").
func DecodeDescription(field string, raw json.RawMessage) (string, error) {
	if jsonbody.Kind(raw) == 'n' {
		return "", nil
	}
	s, ok := jsonbody.String(raw)
	if !ok {
		return "", problem.Invalid(field, "must be a string or null")
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		return "", problem.Invalid(field, "must be at most %d characters", MaxDescriptionLength)
	}
	return s, nil
}

// DecodeMetadata decodes field as metadata: an object of at most
// MaxMetadataKeys strings, or null (nil, as is an empty object).
func DecodeMetadata(field string, raw json.RawMessage) (map[string]string, error) {
	switch jsonbody.Kind(raw) {
	case 'n':
		return nil, nil
	case '{':
	default:
		return nil, problem.Invalid(field, "must be an object of strings or null")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, problem.Invalid(field, "must be an object of strings or null")
	}
	if len(fields) > MaxMetadataKeys {
		return nil, problem.Invalid(field, "must have at most %d keys", MaxMetadataKeys)
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
		path := field + "." + k
		switch n := utf8.RuneCountInString(k); {
		case n == 0:
			return nil, problem.Invalid(field, "keys must not be empty")
		case n > MaxMetadataKeyLength:
			return nil, problem.Invalid(path, "is a key longer than %d characters", MaxMetadataKeyLength)
		}
		if strings.IndexFunc(k, unicode.IsControl) >= 0 {
			return nil, problem.Invalid(path, "is a key with control characters")
		}
		v, ok := jsonbody.String(fields[k])
		if !ok {
			return nil, problem.Invalid(path, "must be a string")
		}
		if utf8.RuneCountInString(v) > MaxMetadataValue {
			return nil, problem.Invalid(path, "must be at most %d characters", MaxMetadataValue)
		}
		md[k] = v
	}
	return md, nil
}

// DecodeSource decodes field as a payment source token: 1 to
// MaxSourceLength letters, digits and underscores, or null ("", which the
// caller turns into DefaultSource or refuses).
func DecodeSource(field string, raw json.RawMessage) (string, error) {
	if jsonbody.Kind(raw) == 'n' {
		return "", nil
	}
	s, ok := jsonbody.String(raw)
	if !ok {
		return "", problem.Invalid(field, "must be a string or null")
	}
	if len(s) < 1 || len(s) > MaxSourceLength {
		return "", problem.Invalid(field, "must be between 1 and %d characters", MaxSourceLength)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return "", problem.Invalid(field, "must hold only letters, digits and underscores")
		}
	}
	return s, nil
}
