package simulator

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// The source tokens the simulator understands.
const (
	TokenVisa        = "tok_visa"
	TokenDeclined    = "tok_chargeDeclined"
	TokenUnavailable = "tok_unavailable"
	TokenTimeout     = "tok_timeout"
	TokenSlow        = "tok_slow"
	// TokenFlaky answers 503 (nothing charged) for Options.FlakyFor after
	// the first request with its key, then charges as TokenVisa does: a
	// provider outage that ends.
	TokenFlaky = "tok_flaky"
	// Charges with these succeed; refunds of them behave as the charges of
	// tok_unavailable, tok_timeout and tok_slow do (see refund.go).
	TokenRefundUnavailable = "tok_refundUnavailable"
	TokenRefundTimeout     = "tok_refundTimeout"
	TokenRefundSlow        = "tok_refundSlow"
)

// Statuses of a charge.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Limits on a charge request. Lengths count characters (Unicode code
// points), not bytes, and are no lower than the API's (internal/payments,
// not imported: the simulator stands for an external system), so that it
// refuses nothing the API accepts; a request it refuses is a final error.
const (
	MaxKeyLength      = 255
	maxAmount         = 99_999_999 // Stripe's eight digits
	maxCustomer       = 255
	maxDescription    = 1000
	maxMetadataKeys   = 20
	maxMetadataKey    = 40
	maxMetadataValue  = 500
	idPrefix          = "prch_"
	pointerKeyPrefix  = "id#"
	flakyKeyPrefix    = "flaky#"
	refundKeyPrefix   = "re#"
	maxCharacterBytes = 6 // a character JSON-escaped, as encoding/json does "<": \u003c
	// maxBody holds the largest request within the limits above with every
	// character escaped, plus 4 KiB for the rest (names, punctuation, the
	// source).
	maxBody = maxCharacterBytes*(maxCustomer+maxDescription+maxMetadataKeys*(maxMetadataKey+maxMetadataValue)) + 4<<10
)

// behaviour is what a source token makes the simulator do.
type behaviour int

const (
	succeed behaviour = iota
	decline
	unavailable
	hold
	slow
	flaky
)

var tokens = map[string]behaviour{
	TokenVisa:        succeed,
	TokenDeclined:    decline,
	TokenUnavailable: unavailable,
	TokenTimeout:     hold,
	TokenSlow:        slow,
	TokenFlaky:       flaky,
	// Refunds of these charges are unavailable, held or slow.
	TokenRefundUnavailable: succeed,
	TokenRefundTimeout:     succeed,
	TokenRefundSlow:        succeed,
}

// chargeRequest is the body of POST /v1/charges.
type chargeRequest struct {
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Source      string            `json:"source"`
	Customer    string            `json:"customer"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// invalidError is a 400 invalid_request naming the offending parameter.
type invalidError struct {
	param, message string
}

func (e *invalidError) Error() string { return e.param + ": " + e.message }

func invalid(param, format string, args ...any) *invalidError {
	return &invalidError{param: param, message: fmt.Sprintf(format, args...)}
}

// parseKey validates the idempotency key: one value of 1 to 255 characters
// in 0x21-0x7E, not in the namespace of the id pointer items nor in that of
// the refunds.
func parseKey(param string, values []string) (string, error) {
	switch {
	case len(values) == 0 || values[0] == "":
		return "", invalid(param, "an idempotency key is required")
	case len(values) > 1:
		return "", invalid(param, "give one idempotency key")
	}
	k := values[0]
	if len(k) > MaxKeyLength {
		return "", invalid(param, "longer than %d characters", MaxKeyLength)
	}
	for i := range len(k) {
		if c := k[i]; c < 0x21 || c > 0x7e {
			return "", invalid(param, "character %d is outside 0x21-0x7E", i+1)
		}
	}
	for _, reserved := range []string{pointerKeyPrefix, flakyKeyPrefix, refundKeyPrefix} {
		if strings.HasPrefix(k, reserved) {
			return "", invalid(param, "keys starting with %q are reserved", reserved)
		}
	}
	return k, nil
}

// parseChargeRequest reads and validates a charge request, normalizing the
// currency to lower case, and returns what its source token does.
func parseChargeRequest(w http.ResponseWriter, r *http.Request) (chargeRequest, behaviour, error) {
	var req chargeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, 0, invalid("", "the body is larger than %d bytes", maxBody)
		}
		var wrongType *json.UnmarshalTypeError
		if errors.As(err, &wrongType) && wrongType.Field != "" {
			return req, 0, invalid(wrongType.Field, "must be of type %s", wrongType.Type)
		}
		return req, 0, invalid("", "the body is not a valid charge request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, 0, invalid("", "the body holds more than one JSON value")
	}
	if req.Amount <= 0 || req.Amount > maxAmount {
		return req, 0, invalid("amount", "must be an integer from 1 to %d", maxAmount)
	}
	if !isCurrency(req.Currency) {
		return req, 0, invalid("currency", "must be a three-letter ISO currency code")
	}
	req.Currency = strings.ToLower(req.Currency)
	if n := utf8.RuneCountInString(req.Customer); n < 1 || n > maxCustomer {
		return req, 0, invalid("customer", "must be 1 to %d characters", maxCustomer)
	}
	if utf8.RuneCountInString(req.Description) > maxDescription {
		return req, 0, invalid("description", "must be at most %d characters", maxDescription)
	}
	if len(req.Metadata) > maxMetadataKeys {
		return req, 0, invalid("metadata", "at most %d keys", maxMetadataKeys)
	}
	for k, v := range req.Metadata {
		if n := utf8.RuneCountInString(k); n < 1 || n > maxMetadataKey || utf8.RuneCountInString(v) > maxMetadataValue {
			return req, 0, invalid("metadata", "keys must be 1 to %d characters and values at most %d", maxMetadataKey, maxMetadataValue)
		}
	}
	b, ok := tokens[req.Source]
	if !ok {
		return req, 0, invalid("source", "unknown source token %q", req.Source)
	}
	return req, b, nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, c := range []byte(strings.ToLower(s)) {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// paramsHash identifies the parameters of a (normalized) request: a second
// request with the same key must carry the same hash.
func paramsHash(req chargeRequest) string { return hashJSON(req) }

// hashJSON is the hex SHA-256 of v's JSON encoding (struct fields in order,
// map keys sorted).
func hashJSON(v any) string {
	b, _ := json.Marshal(v) // only simulator types, which always encode
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// newChargeID returns a fresh charge id.
func newChargeID() string { return newID(idPrefix) }

// newID returns prefix and 96 random bits in hex.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// charge is a recorded charge, with the answer to replay.
type charge struct {
	Key            string
	ID             string
	Status         string
	Amount         int64
	Currency       string
	Source         string
	Customer       string
	Description    string
	Metadata       map[string]string
	FailureCode    string
	FailureMessage string
	Params         string
	ResponseStatus int
	ResponseBody   []byte
	Count          int
	Created        time.Time
	// Refunded is the sum of the charge's refunds, RefundKeys their keys.
	Refunded   int64
	RefundKeys []string
}

// newCharge builds the charge that req makes under key, answer included.
func newCharge(key string, req chargeRequest, b behaviour, now time.Time) charge {
	c := charge{
		Key:         key,
		ID:          newChargeID(),
		Status:      StatusSucceeded,
		Amount:      req.Amount,
		Currency:    req.Currency,
		Source:      req.Source,
		Customer:    req.Customer,
		Description: req.Description,
		Metadata:    req.Metadata,
		Params:      paramsHash(req),
		Count:       1,
		Created:     time.Unix(now.Unix(), 0),
	}
	if b == decline {
		c.Status = StatusFailed
		c.FailureCode = "card_declined"
		c.FailureMessage = "Your card was declined."
		c.ResponseStatus = http.StatusPaymentRequired
		c.ResponseBody = encode(errorBody{Error: apiError{
			Type:        "card_error",
			Code:        c.FailureCode,
			DeclineCode: "generic_decline",
			Message:     c.FailureMessage,
			Charge:      c.ID,
		}})
		return c
	}
	c.ResponseStatus = http.StatusCreated
	c.ResponseBody = encode(c.object())
	return c
}

// chargeObject is the JSON form of a charge.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Status         string            `json:"status"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Source         string            `json:"source"`
	Customer       string            `json:"customer"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Created        int64             `json:"created"`
	IdempotencyKey string            `json:"idempotency_key"`
	FailureCode    string            `json:"failure_code,omitempty"`
	FailureMessage string            `json:"failure_message,omitempty"`
}

func (c charge) object() chargeObject {
	return chargeObject{
		ID:             c.ID,
		Object:         "charge",
		Status:         c.Status,
		Amount:         c.Amount,
		Currency:       c.Currency,
		Source:         c.Source,
		Customer:       c.Customer,
		Description:    c.Description,
		Metadata:       c.Metadata,
		Created:        c.Created.Unix(),
		IdempotencyKey: c.Key,
		FailureCode:    c.FailureCode,
		FailureMessage: c.FailureMessage,
	}
}

// errorBody is the JSON form of every error answer.
type errorBody struct {
	Error apiError `json:"error"`
}

type apiError struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Param       string `json:"param,omitempty"`
	Charge      string `json:"charge,omitempty"`
}

func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // only simulator-built values, which always encode
	return buf.Bytes()
}
