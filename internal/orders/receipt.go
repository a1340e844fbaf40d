package orders

import (
	"fmt"
	"strings"

	"github.com/oncehq/once/internal/outbox"
)

// JobID is the ID of the receipt job of order id: one job per order.
func JobID(orderID string) string { return outbox.JobIDPrefix + strings.TrimPrefix(orderID, idPrefix) }

// NewReceiptJob returns the queued receipt job of the paid order o, charged
// as charge.
func NewReceiptJob(o Order, charge string) outbox.Job {
	id := JobID(o.ID)
	text := fmt.Sprintf("Thank you for your order %s.\n\nAmount: %d %s (in minor units)\nCustomer: %s\nCharge: %s\n",
		o.ID, o.Amount, strings.ToUpper(o.Currency), o.Customer, charge)
	if o.Description != "" {
		text += "Description: " + o.Description + "\n"
	}
	return outbox.Job{
		PK:      outbox.JobPK(o.Tenant, id),
		Kind:    outbox.KindReceipt,
		ID:      id,
		Tenant:  o.Tenant,
		Order:   o.ID,
		OrderPK: o.PK,
		To:      o.Email,
		Subject: "Your receipt for order " + o.ID,
		Text:    text,
		Created: o.Created,
		State:   outbox.Queued,
	}
}
