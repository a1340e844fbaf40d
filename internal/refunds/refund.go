package refunds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/jsonbody"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// KeyAttr is the partition key attribute of the refunds table.
const KeyAttr = "pk"

// Status is the status of every refund the API renders: a refund that was
// not made is answered as a problem, not as a refund.
const Status = provider.StatusSucceeded

// Reasons a refund may give.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

const (
	idPrefix = "re_"
	idLength = 24 // hex characters
)

// Request is a validated create-refund request. Its JSON encoding is a body
// that Decode accepts and decodes back to the same Request.
type Request struct {
	// Payment is the ID of the payment to refund.
	Payment string `json:"payment"`
	// Amount is in the payment currency's minor units; 0 when absent: all
	// that is left of the payment.
	Amount int64 `json:"amount,omitempty"`
	// Reason is one of Reasons, or empty.
	Reason string `json:"reason,omitempty"`
	// Metadata is nil when absent or empty.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Decode parses and validates a create-refund request body: payment
// (required, a payment ID), amount (optional, as a payment's), reason
// (optional, one of Reasons, or null) and metadata (as a payment's). Every
// failure is a *problem.FieldError naming the field.
func Decode(body []byte) (Request, error) {
	var req Request
	err := jsonbody.Object(body, []string{"payment"}, func(name string, raw json.RawMessage) error {
		var err error
		switch name {
		case "payment":
			s, ok := jsonbody.String(raw)
			if !ok || !payments.ValidID(s) {
				return problem.Invalid("payment", "must be a payment ID (pay_ and 24 characters)")
			}
			req.Payment = s
		case "amount":
			req.Amount, err = payments.DecodeAmount("amount", raw)
		case "reason":
			req.Reason, err = decodeReason(raw)
		case "metadata":
			req.Metadata, err = payments.DecodeMetadata("metadata", raw)
		default:
			err = problem.Invalid(name, "is not a known parameter")
		}
		return err
	})
	if err != nil {
		return Request{}, err
	}
	return req, nil
}

func decodeReason(raw json.RawMessage) (string, error) {
	if jsonbody.Kind(raw) == 'n' {
		return "", nil
	}
	s, ok := jsonbody.String(raw)
	if !ok || !slices.Contains(Reasons, s) {
		return "", problem.Invalid("reason", "must be one of %s, or null", strings.Join(Reasons, ", "))
	}
	return s, nil
}

// ID is the refund ID of the request under key: "re_" and the first 24 hex
// characters of the SHA-256 of key.ID(). It is derived, not drawn, so that
// the answer can be rebuilt from the idempotency record, and a key names one
// refund for ever.
func ID(key idempotency.Key) string {
	sum := sha256.Sum256([]byte(key.ID()))
	return idPrefix + hex.EncodeToString(sum[:])[:idLength]
}

// ValidID reports whether id has the shape of a refund ID.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+idLength || !strings.HasPrefix(id, idPrefix) {
		return false
	}
	for _, c := range []byte(id[len(idPrefix):]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// PK is the partition key of tenant's refund id.
func PK(tenant, id string) string { return tenant + "#" + id }

// Location is the URL path of the refund id.
func Location(id string) string { return "/v1/refunds/" + id }

// Refund is a refund as stored in the refunds table. Its JSON rendering is
// the API's (MarshalJSON).
type Refund struct {
	// PK is the item's partition key: "<tenant>#<id>".
	PK string `dynamodbav:"pk"`
	// ID is the refund's ID (see ID).
	ID string `dynamodbav:"id"`
	// Tenant owns the refund.
	Tenant string `dynamodbav:"tenant"`
	// Payment is the refunded payment's ID.
	Payment string `dynamodbav:"payment"`
	// Amount is what was refunded, in the currency's minor units.
	Amount int64 `dynamodbav:"amount"`
	// Currency is the payment's, lower case.
	Currency string `dynamodbav:"currency"`
	// Reason is empty when the request gave none.
	Reason string `dynamodbav:"reason,omitempty"`
	// Metadata is nil when there is none.
	Metadata map[string]string `dynamodbav:"metadata,omitempty"`
	// Status is Status.
	Status string `dynamodbav:"status"`
	// ProviderRefundID is the provider's ID of the refund.
	ProviderRefundID string `dynamodbav:"provider_refund_id"`
	// Created is when the request was first reserved, to the second.
	Created time.Time `dynamodbav:"created,unixtime"`
}

// New returns the refund that req, sent under key and first reserved at
// created, made as the provider's refund r.
func New(key idempotency.Key, req Request, r provider.Refund, created time.Time) Refund {
	id := ID(key)
	return Refund{
		PK:               PK(key.Tenant, id),
		ID:               id,
		Tenant:           key.Tenant,
		Payment:          req.Payment,
		Amount:           r.Amount,
		Currency:         strings.ToLower(r.Currency),
		Reason:           req.Reason,
		Metadata:         req.Metadata,
		Status:           Status,
		ProviderRefundID: r.ID,
		Created:          time.Unix(created.Unix(), 0).UTC(),
	}
}

// MarshalJSON renders r as the API does, in a fixed field order: reason
// null and metadata {} when absent, created in unix seconds. Neither the
// tenant nor the partition key is rendered.
func (r Refund) MarshalJSON() ([]byte, error) {
	var reason *string
	if r.Reason != "" {
		reason = &r.Reason
	}
	_, md := payments.RenderOptional("", r.Metadata)
	return json.Marshal(rendering{
		ID: r.ID, Object: "refund", Payment: r.Payment, Amount: r.Amount, Currency: r.Currency,
		Reason: reason, Metadata: md, Status: r.Status, ProviderRefundID: r.ProviderRefundID, Created: r.Created.Unix(),
	})
}

type rendering struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Payment          string            `json:"payment"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Reason           *string           `json:"reason"`
	Metadata         map[string]string `json:"metadata"`
	Status           string            `json:"status"`
	ProviderRefundID string            `json:"provider_refund_id"`
	Created          int64             `json:"created"`
}
