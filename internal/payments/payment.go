package payments

import (
	"crypto/rand"
	"encoding/json"
	"time"
)

// Status is the state of a payment.
type Status string

// The states of a payment. A payment is created pending and settled once.
const (
	StatusPending   Status = "pending"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// KeyAttr is the partition key attribute of the payments table.
const KeyAttr = "pk"

// Attributes of a payment item that other domains condition on and update
// (refunds: see Payment.Refundable).
const (
	AttrStatus         = "status"
	AttrAmount         = "amount"
	AttrAmountRefunded = "amount_refunded"
	AttrRefundable     = "refundable"
	AttrHolds          = "holds"
)

// Payment is a payment as stored in the payments table. Its JSON rendering is
// the API's (MarshalJSON).
type Payment struct {
	// PK is the item's partition key: "<tenant>#<id>".
	PK string `dynamodbav:"pk"`
	// ID is the payment's public ID, "pay_" and 24 characters.
	ID string `dynamodbav:"id"`
	// Tenant owns the payment.
	Tenant string `dynamodbav:"tenant"`
	// Amount is in the currency's minor units.
	Amount int64 `dynamodbav:"amount"`
	// Currency is an ISO 4217 code, lower case.
	Currency string `dynamodbav:"currency"`
	// Customer is the caller's customer reference.
	Customer string `dynamodbav:"customer"`
	// Description is empty when there is none.
	Description string `dynamodbav:"description,omitempty"`
	// Metadata is nil when there is none.
	Metadata map[string]string `dynamodbav:"metadata,omitempty"`
	// Source is the payment source to charge (a provider token).
	Source string `dynamodbav:"source"`
	// Status is the payment's state.
	Status Status `dynamodbav:"status"`
	// Created is when the payment was created, to the second.
	Created time.Time `dynamodbav:"created,unixtime"`
	// ProviderChargeID is the provider's charge, once settled.
	ProviderChargeID string `dynamodbav:"provider_charge_id,omitempty"`
	// FailureCode says why a failed payment failed.
	FailureCode string `dynamodbav:"failure_code,omitempty"`
	// AmountRefunded is the sum of the payment's refunds.
	AmountRefunded int64 `dynamodbav:"amount_refunded,omitempty"`
	// Refundable is what is left to refund less the refunds in flight:
	// Amount - AmountRefunded - the sum of Holds. Settle sets it, with Holds
	// and AmountRefunded, when the payment succeeds; a payment that has not
	// has none. A DynamoDB condition cannot add, so it is kept rather than
	// derived: a refund takes its amount from it when it starts,
	// conditioned on Refundable >= amount.
	Refundable int64 `dynamodbav:"refundable,omitempty"`
	// Holds are the amounts taken from Refundable by refunds in flight, by
	// the hash of their idempotency key (idempotency.Key.Hash). A hold goes
	// into AmountRefunded when its refund is made, back into Refundable
	// when it provably is not.
	Holds map[string]int64 `dynamodbav:"holds,omitempty"`
}

// New returns the pending payment that req creates for tenant at now, with a
// fresh ID.
func New(tenant string, req Request, now time.Time) Payment {
	id := NewID()
	return Payment{
		PK:          PK(tenant, id),
		ID:          id,
		Tenant:      tenant,
		Amount:      req.Amount,
		Currency:    req.Currency,
		Customer:    req.Customer,
		Description: req.Description,
		Metadata:    req.Metadata,
		Source:      req.Source,
		Status:      StatusPending,
		Created:     time.Unix(now.Unix(), 0).UTC(),
	}
}

// PK is the partition key of tenant's payment id.
func PK(tenant, id string) string { return tenant + "#" + id }

// Location is the URL path of the payment.
func (p Payment) Location() string { return "/v1/payments/" + p.ID }

// MarshalJSON renders p as the API does: description null when absent,
// metadata {} when absent, provider_charge_id and failure_code null until
// the worker has settled the payment (a failed payment may have no charge,
// when the provider refused the request itself), created in unix seconds.
// Neither the tenant, the partition key, the source nor what is refundable
// or held is rendered.
func (p Payment) MarshalJSON() ([]byte, error) {
	desc, md := RenderOptional(p.Description, p.Metadata)
	return json.Marshal(rendering{
		ID:               p.ID,
		Object:           "payment",
		Amount:           p.Amount,
		AmountRefunded:   p.AmountRefunded,
		Currency:         p.Currency,
		Customer:         p.Customer,
		Description:      desc,
		Metadata:         md,
		Status:           p.Status,
		ProviderChargeID: nullable(p.ProviderChargeID),
		FailureCode:      nullable(p.FailureCode),
		Created:          p.Created.Unix(),
	})
}

// nullable is s, or nil (JSON null) when s is empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RenderOptional returns the optional fields of a request as the API renders
// them: the description null (nil) when empty, the metadata {} when nil.
func RenderOptional(description string, metadata map[string]string) (*string, map[string]string) {
	var desc *string
	if description != "" {
		desc = &description
	}
	if metadata == nil {
		metadata = map[string]string{}
	}
	return desc, metadata
}

type rendering struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Amount int64  `json:"amount"`
	// AmountRefunded is the sum of the payment's refunds.
	AmountRefunded int64             `json:"amount_refunded"`
	Currency       string            `json:"currency"`
	Customer       string            `json:"customer"`
	Description    *string           `json:"description"`
	Metadata       map[string]string `json:"metadata"`
	Status         Status            `json:"status"`
	// ProviderChargeID and FailureCode are set once the payment is settled.
	ProviderChargeID *string `json:"provider_charge_id"`
	FailureCode      *string `json:"failure_code"`
	Created          int64   `json:"created"`
}

const (
	idPrefix = "pay_"
	idLength = 24
	alphabet = "abcdefghijklmnopqrstuvwxyz234567" // RFC 4648 base32, lower case
)

// NewID returns a new payment ID: "pay_" and 24 lower-case base32 characters
// from crypto/rand (120 bits).
func NewID() string {
	var b [idLength]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	out := make([]byte, len(idPrefix)+idLength)
	copy(out, idPrefix)
	for i, v := range b {
		out[len(idPrefix)+i] = alphabet[v&31] // 256 is a multiple of 32: unbiased
	}
	return string(out)
}

// ValidID reports whether id has the shape of a payment ID.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+idLength || id[:len(idPrefix)] != idPrefix {
		return false
	}
	for i := len(idPrefix); i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
