package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// RefundRequest is what to refund.
type RefundRequest struct {
	// Charge is the provider's ID of the charge to refund.
	Charge string `json:"charge"`
	// Amount is in the charge currency's smallest unit, positive, at most
	// what is left of the charge.
	Amount int64 `json:"amount"`
	// Reason is optional: duplicate, fraudulent or requested_by_customer.
	Reason string `json:"reason,omitempty"`
	// Metadata is optional.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Refund is a refund made by the provider.
type Refund struct {
	// ID is the provider's refund id.
	ID string
	// Charge is the provider's ID of the refunded charge.
	Charge string
	// Status is StatusSucceeded.
	Status string
	// Amount and Currency are what was refunded.
	Amount   int64
	Currency string
	// Created is when the provider made the refund, to the second.
	Created time.Time
}

// Refund asks the provider to refund req under the idempotency key. It
// returns the succeeded refund, or an error that wraps ErrNotRefunded or
// ErrOutcomeUnknown, matches ErrRejected (a *StatusError for a request the
// provider refused as wrong: a charge it does not know, or an amount above
// what is left of it), or is anything else for a call that was wrong; the
// outcomes are those of Charge, less the decline, which refunds do not
// have. A refund in any status but succeeded is an unknown outcome.
func (c *Client) Refund(ctx context.Context, key string, req RefundRequest) (Refund, error) {
	r, err := c.refund(ctx, key, req)
	if err != nil {
		return Refund{}, fmt.Errorf("provider: refund: %w", err)
	}
	return r, nil
}

func (c *Client) refund(ctx context.Context, key string, req RefundRequest) (Refund, error) {
	a, err := c.post(ctx, "/v1/refunds", key, req, ErrNotRefunded)
	if err != nil {
		return Refund{}, err
	}
	switch s := a.status; {
	case s == http.StatusServiceUnavailable || s == http.StatusTooManyRequests:
		return Refund{}, fmt.Errorf("%w: status %d", ErrNotRefunded, s)
	case s >= 200 && s < 300:
		if a.readErr != nil {
			return Refund{}, fmt.Errorf("%w: status %d: reading the answer: %w", ErrOutcomeUnknown, s, a.readErr)
		}
		r, err := parseRefund(a.body, key)
		if err != nil {
			return Refund{}, fmt.Errorf("%w: status %d: %w", ErrOutcomeUnknown, s, err)
		}
		return r, nil
	case s >= 400 && s < 500:
		return Refund{}, statusError(s, a.body)
	default:
		return Refund{}, fmt.Errorf("%w: status %d", ErrOutcomeUnknown, s)
	}
}

// LookupRefund returns the succeeded refund that the provider made under
// the idempotency key, or an error wrapping ErrNoRefund when it made none.
// Any other failure is a plain error (a *StatusError for an unexpected
// answer): look up again later. As for Lookup, ErrNoRefund proves nothing
// once a request with the key may still be on its way.
func (c *Client) LookupRefund(ctx context.Context, key string) (Refund, error) {
	r, err := c.lookupRefund(ctx, key)
	if err != nil {
		return Refund{}, fmt.Errorf("provider: lookup refund: %w", err)
	}
	return r, nil
}

func (c *Client) lookupRefund(ctx context.Context, key string) (Refund, error) {
	if key == "" {
		return Refund{}, errors.New("the idempotency key is empty")
	}
	status, raw, err := c.get(ctx, "/v1/refunds?idempotency_key="+url.QueryEscape(key))
	if err != nil {
		return Refund{}, err
	}
	switch status {
	case http.StatusOK:
		return parseRefund(raw, key)
	case http.StatusNotFound:
		if e, ok := parseError(raw); ok && e.Code == "resource_missing" {
			return Refund{}, ErrNoRefund
		}
	}
	return Refund{}, statusError(status, raw)
}

// Refunds returns the refunds of the charge with the provider's ID charge,
// oldest first: at most 100 (the provider's page), with more reporting
// whether there are others.
func (c *Client) Refunds(ctx context.Context, charge string) (refunds []Refund, more bool, err error) {
	refunds, more, err = c.refunds(ctx, charge)
	if err != nil {
		return nil, false, fmt.Errorf("provider: list refunds: %w", err)
	}
	return refunds, more, nil
}

func (c *Client) refunds(ctx context.Context, charge string) ([]Refund, bool, error) {
	status, raw, err := c.get(ctx, "/v1/refunds?charge="+url.QueryEscape(charge))
	if err != nil {
		return nil, false, err
	}
	if status != http.StatusOK {
		return nil, false, statusError(status, raw)
	}
	var list struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || list.Object != "list" {
		return nil, false, fmt.Errorf("the answer is not a list (%v)", err)
	}
	refunds := make([]Refund, 0, len(list.Data))
	for _, d := range list.Data {
		r, err := parseRefund(d, "")
		if err != nil {
			return nil, false, err
		}
		refunds = append(refunds, r)
	}
	return refunds, list.HasMore, nil
}

// refundJSON is the provider's refund object.
type refundJSON struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Charge         string `json:"charge"`
	Created        int64  `json:"created"`
	IdempotencyKey string `json:"idempotency_key"`
}

// parseRefund parses a succeeded refund; when key is set, one the provider
// filed under key (or under no key it says).
func parseRefund(raw []byte, key string) (Refund, error) {
	var j refundJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return Refund{}, fmt.Errorf("the answer is not a refund: %w", err)
	}
	switch {
	case j.ID == "" || j.Object != "refund":
		return Refund{}, errors.New("the answer is not a refund")
	case key != "" && j.IdempotencyKey != "" && j.IdempotencyKey != key:
		return Refund{}, errors.New("the answer is the refund of another key")
	case j.Status != StatusSucceeded:
		return Refund{}, fmt.Errorf("refund %s has status %q", j.ID, j.Status)
	}
	r := Refund{ID: j.ID, Charge: j.Charge, Status: j.Status, Amount: j.Amount, Currency: j.Currency}
	if j.Created > 0 {
		r.Created = time.Unix(j.Created, 0).UTC()
	}
	return r, nil
}
