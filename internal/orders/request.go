package orders

import (
	"encoding/json"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/jsonbody"
	"github.com/oncehq/once/internal/payments"
)

// MaxEmailLength is the longest e-mail address accepted, in characters
// (RFC 5321's limit on a path, less its angle brackets).
const MaxEmailLength = 254

// Request is a validated create-order request: a create-payment request
// whose source is required, and the e-mail address the receipt goes to.
type Request struct {
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"` // lower case
	Customer    string            `json:"customer"`
	Source      string            `json:"source"`
	Email       string            `json:"email"`
	Description string            `json:"description,omitempty"` // empty when absent
	Metadata    map[string]string `json:"metadata,omitempty"`    // nil when absent or empty
}

// Decode parses and validates a create-order request body with the rules
// of payments (amount, currency, customer, description, metadata, source)
// and email (an address of at most MaxEmailLength characters). Every failure
// is a *problem.FieldError naming the field.
func Decode(body []byte) (Request, error) {
	var req Request
	err := jsonbody.Object(body, []string{"amount", "currency", "customer", "source", "email"}, func(name string, raw json.RawMessage) error {
		var err error
		switch name {
		case "amount":
			req.Amount, err = payments.DecodeAmount(name, raw)
		case "currency":
			req.Currency, err = payments.DecodeCurrency(name, raw)
		case "customer":
			req.Customer, err = payments.DecodeCustomer(name, raw)
		case "source":
			req.Source, err = payments.DecodeSource(name, raw)
		case "email":
			req.Email, err = DecodeEmail(name, raw)
		case "description":
			req.Description, err = payments.DecodeDescription(name, raw)
		case "metadata":
			req.Metadata, err = payments.DecodeMetadata(name, raw)
		default:
			err = problem.Invalid(name, "is not a known parameter")
		}
		return err
	})
	if err != nil {
		return Request{}, err
	}
	if req.Source == "" {
		return Request{}, problem.Invalid("source", "is required")
	}
	return req, nil
}

// DecodeEmail decodes field as an e-mail address: a bare addr-spec
// (local@domain, no display name, no comments) of printable ASCII, at most
// MaxEmailLength characters, whose local part has at most 64 and whose
// domain is a host name of at least two labels.
func DecodeEmail(field string, raw json.RawMessage) (string, error) {
	s, ok := jsonbody.String(raw)
	if !ok {
		return "", problem.Invalid(field, "must be a string")
	}
	if utf8.RuneCountInString(s) > MaxEmailLength {
		return "", problem.Invalid(field, "must be at most %d characters", MaxEmailLength)
	}
	if !validEmail(s) {
		return "", problem.Invalid(field, "must be an e-mail address such as name@example.com")
	}
	return s, nil
}

func validEmail(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	addr, err := mail.ParseAddress(s)
	if err != nil || addr.Name != "" || addr.Address != s {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	local, domain := s[:at], s[at+1:]
	if len(local) < 1 || len(local) > 64 {
		return false
	}
	return hostName(domain)
}

// hostName reports whether s is a DNS host name of at least two labels of
// letters, digits and inner hyphens, with a top-level label that is not
// all digits.
func hostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if len(l) < 1 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}
