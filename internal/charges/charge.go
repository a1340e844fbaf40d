package charges

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// Status is the status of every charge the API renders: a declined charge is
// answered as a problem, not as a charge.
const Status = provider.StatusSucceeded

const idPrefix = "ch_"

// Decode parses and validates a create-charge request body: a create-payment
// request whose source is required. Every failure is a
// *problem.FieldError.
func Decode(body []byte) (payments.Request, error) { return payments.DecodeWithSource(body) }

// ProviderRequest is the provider's charge request for req.
func ProviderRequest(req payments.Request) provider.ChargeRequest {
	return provider.ChargeRequest{
		Amount:      req.Amount,
		Currency:    req.Currency,
		Source:      req.Source,
		Customer:    req.Customer,
		Description: req.Description,
		Metadata:    req.Metadata,
	}
}

// ID is the charge ID of the provider's charge providerChargeID made for the
// request under key: "ch_" and the first 24 hex characters of the SHA-256 of
// key.ID(), a newline and providerChargeID.
//
// It is derived, not drawn, so that the reconciler, which has the
// idempotency record and looks the provider's charge up, rebuilds the answer
// the request would have got byte for byte. It is derived from the
// provider's charge, not from the key alone (nor from the forwarded key,
// which a key reused with the same body after both retentions forwards
// again): every charge the provider makes has its own ID, while a retry the
// provider answers with the charge it already made gets that charge's ID
// again.
func ID(key idempotency.Key, providerChargeID string) string {
	sum := sha256.Sum256([]byte(key.ID() + "\n" + providerChargeID))
	return idPrefix + hex.EncodeToString(sum[:])[:24]
}

// Charge is a succeeded charge as the API renders it (MarshalJSON).
type Charge struct {
	// ID is the charge's ID (see ID).
	ID string
	// Amount is in the currency's minor units.
	Amount int64
	// Currency is an ISO 4217 code, lower case.
	Currency string
	// Customer is the caller's customer reference.
	Customer string
	// Description is empty when there is none.
	Description string
	// Metadata is nil when there is none.
	Metadata map[string]string
	// ProviderChargeID is the provider's ID of the charge.
	ProviderChargeID string
	// Created is when the request was first reserved, to the second.
	Created time.Time
}

// New returns the charge that req, sent under key and first reserved at
// created, made as the provider's charge providerChargeID.
func New(key idempotency.Key, req payments.Request, providerChargeID string, created time.Time) Charge {
	return Charge{
		ID:               ID(key, providerChargeID),
		Amount:           req.Amount,
		Currency:         req.Currency,
		Customer:         req.Customer,
		Description:      req.Description,
		Metadata:         req.Metadata,
		ProviderChargeID: providerChargeID,
		Created:          time.Unix(created.Unix(), 0).UTC(),
	}
}

// MarshalJSON renders c as the API does, in a fixed field order: description
// null when absent and metadata {} when absent (as payments are rendered),
// status succeeded, created in unix seconds.
func (c Charge) MarshalJSON() ([]byte, error) {
	desc, md := payments.RenderOptional(c.Description, c.Metadata)
	return json.Marshal(rendering{
		ID: c.ID, Object: "charge", Amount: c.Amount, Currency: c.Currency, Customer: c.Customer,
		Description: desc, Metadata: md, Status: Status, ProviderChargeID: c.ProviderChargeID,
		Created: c.Created.Unix(),
	})
}

type rendering struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Customer         string            `json:"customer"`
	Description      *string           `json:"description"`
	Metadata         map[string]string `json:"metadata"`
	Status           string            `json:"status"`
	ProviderChargeID string            `json:"provider_charge_id"`
	Created          int64             `json:"created"`
}
