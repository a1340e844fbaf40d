package orders

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/payments"
)

// The recovery points of an order request, in order.
const (
	PointOrderCreated  = "order_created"
	PointChargeCreated = "charge_created"
	PointFinished      = "finished"
)

// Status is the state of an order's payment.
type Status string

// The states of an order: created with the reservation, then paid or failed
// once the provider answered.
const (
	StatusCreated Status = "created"
	StatusPaid    Status = "paid"
	StatusFailed  Status = "failed"
)

// Receipt is the state of a paid order's receipt.
type Receipt string

// The states of a receipt: queued when the order is finished (its job is in
// the outbox), sent once the receipts function has sent it.
const (
	ReceiptQueued Receipt = "queued"
	ReceiptSent   Receipt = outbox.ReceiptSent
)

// KeyAttr is the partition key attribute of the orders table.
const KeyAttr = outbox.KeyAttr

// Order is an order as stored in the orders table.
type Order struct {
	// PK is "<tenant>#<id>".
	PK string `dynamodbav:"pk"`
	// ID is "ord_" and 24 characters (see ID).
	ID     string `dynamodbav:"id"`
	Tenant string `dynamodbav:"tenant"`
	// Amount is in the currency's minor units; Currency is lower case.
	Amount      int64             `dynamodbav:"amount"`
	Currency    string            `dynamodbav:"currency"`
	Customer    string            `dynamodbav:"customer"`
	Email       string            `dynamodbav:"email"`
	Description string            `dynamodbav:"description,omitempty"`
	Metadata    map[string]string `dynamodbav:"metadata,omitempty"`
	Source      string            `dynamodbav:"source"`
	Status      Status            `dynamodbav:"status"`
	// RecoveryPoint is the last point the order's request committed.
	RecoveryPoint string `dynamodbav:"recovery_point"`
	// Charge is the provider's charge, once it answered.
	Charge string `dynamodbav:"charge,omitempty"`
	// FailureCode says why a failed order failed (card_declined,
	// provider_rejected).
	FailureCode string `dynamodbav:"failure_code,omitempty"`
	// Receipt is empty until the order is finished paid; the receipts
	// function sets it and ReceiptSentAt (unix seconds) once sent
	// (outbox.OrderReceipt, outbox.OrderReceiptSentAt).
	Receipt       Receipt `dynamodbav:"receipt,omitempty"`
	ReceiptSentAt int64   `dynamodbav:"receipt_sent_at,omitempty"`
	// Created is when the request was first reserved, in unix seconds.
	Created int64 `dynamodbav:"created"`
}

const (
	idPrefix = "ord_"
	idLength = 24
)

// lowerBase32 is RFC 4648 base32 in lower case, as payment IDs are.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ID is the order ID of the request with fingerprint under key: "ord_" and
// 24 base32 characters (120 bits) of SHA-256 over key.ID() and the
// fingerprint. It is derived, not drawn, so that the request names one order
// however often it starts over, and a reused key with another request names
// another.
func ID(key idempotency.Key, fingerprint string) string {
	sum := sha256.Sum256([]byte(key.ID() + "\x00" + fingerprint))
	return idPrefix + lowerBase32.EncodeToString(sum[:15])
}

// ValidID reports whether id has the shape of an order ID.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+idLength || !strings.HasPrefix(id, idPrefix) {
		return false
	}
	for i := len(idPrefix); i < len(id); i++ {
		if c := id[i]; !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// PK is the partition key of tenant's order id.
func PK(tenant, id string) string { return tenant + "#" + id }

// New returns the order that req creates for tenant as id at created: status
// created, at the first recovery point.
func New(tenant, id string, req Request, created time.Time) Order {
	return Order{
		PK:            PK(tenant, id),
		ID:            id,
		Tenant:        tenant,
		Amount:        req.Amount,
		Currency:      req.Currency,
		Customer:      req.Customer,
		Email:         req.Email,
		Description:   req.Description,
		Metadata:      req.Metadata,
		Source:        req.Source,
		Status:        StatusCreated,
		RecoveryPoint: PointOrderCreated,
		Created:       created.Unix(),
	}
}

// Location is the URL path of the order.
func (o Order) Location() string { return "/v1/orders/" + o.ID }

// MarshalJSON renders o as GET /v1/orders/{id} does: the order as it stands
// (status, recovery_point, receipt and receipt_sent_at; null where there is
// nothing yet), description null and metadata {} when absent.
func (o Order) MarshalJSON() ([]byte, error) {
	desc, md := payments.RenderOptional(o.Description, o.Metadata)
	v := view{
		ID: o.ID, Object: "order", Amount: o.Amount, Currency: o.Currency, Customer: o.Customer, Email: o.Email,
		Description: desc, Metadata: md, Status: o.Status, Charge: optional(o.Charge), FailureCode: optional(o.FailureCode),
		RecoveryPoint: o.RecoveryPoint, Receipt: optional(string(o.Receipt)), Created: o.Created,
	}
	if o.ReceiptSentAt > 0 {
		v.ReceiptSentAt = &o.ReceiptSentAt
	}
	return json.Marshal(v)
}

type view struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Customer      string            `json:"customer"`
	Email         string            `json:"email"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	Status        Status            `json:"status"`
	Charge        *string           `json:"charge"`
	FailureCode   *string           `json:"failure_code"`
	RecoveryPoint string            `json:"recovery_point"`
	Receipt       *string           `json:"receipt"`
	ReceiptSentAt *int64            `json:"receipt_sent_at"`
	Created       int64             `json:"created"`
}

// created is the answer of a paid order, 201: the order as it was finished.
type created struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	Customer    string            `json:"customer"`
	Email       string            `json:"email"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	Status      Status            `json:"status"`
	Charge      string            `json:"charge"`
	Receipt     Receipt           `json:"receipt"`
	Created     int64             `json:"created"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
