package worker

import (
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// keyPrefix namespaces the worker's provider keys: the API forwards client
// keys as "once_<hex>" (idempotency.Key.Forward), so the two never meet.
const keyPrefix = "once:payment:"

// ChargeKey is the provider idempotency key under which the worker charges
// tenant's payment id: "once:payment:<tenant>:<id>", for example
// "once:payment:acme:pay_abcdefghijklmnopqrstuvwx". It depends on nothing but
// the payment's identity, so every delivery of the payment's stream record,
// and every retry, charges under the same key. For a valid tenant and payment
// ID it is at most 106 characters of 0x21-0x7E, as the provider requires.
func ChargeKey(tenant, id string) string {
	return keyPrefix + tenant + ":" + id
}

// ChargeRequest is the charge the worker sends for p under
// ChargeKey(p.Tenant, p.ID): the same parameters on every attempt, as the
// provider's idempotency requires (other parameters under the key are
// refused). A tool or test that charges a payment as the worker does sends
// this.
func ChargeRequest(p payments.Payment) provider.ChargeRequest {
	return provider.ChargeRequest{
		Amount:      p.Amount,
		Currency:    p.Currency,
		Source:      p.Source,
		Customer:    p.Customer,
		Description: p.Description,
		Metadata:    p.Metadata,
	}
}
