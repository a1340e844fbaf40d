package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds a call when the http.Client given to New has no
// Timeout.
const DefaultTimeout = 10 * time.Second

// maxAnswer bounds the answer bodies read.
const maxAnswer = 1 << 20

// Statuses of a Charge.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// ChargeRequest is what to charge.
type ChargeRequest struct {
	// Amount is in the currency's smallest unit (cents), positive.
	Amount int64 `json:"amount"`
	// Currency is a three-letter ISO code, lower case.
	Currency string `json:"currency"`
	// Source is the card token (tok_visa, ...).
	Source string `json:"source"`
	// Customer identifies the payer.
	Customer string `json:"customer"`
	// Description is optional.
	Description string `json:"description,omitempty"`
	// Metadata is optional.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Charge is a charge made by the provider.
type Charge struct {
	// ID is the provider's charge id.
	ID string
	// Status is StatusSucceeded or StatusFailed.
	Status string
	// Amount and Currency are what was charged.
	Amount   int64
	Currency string
	// FailureCode says why a failed charge failed (card_declined).
	FailureCode string
	// Created is when the provider made the charge, to the second.
	Created time.Time
}

// Client calls the provider. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// New returns a client of the provider at baseURL (the URL that
// "/v1/charges" is appended to). httpClient's Timeout is the charge
// timeout (DefaultTimeout when zero; nil means a default client); the
// client uses a copy of it that does not follow redirects.
func New(baseURL string, httpClient *http.Client) *Client {
	var hc http.Client
	if httpClient != nil {
		hc = *httpClient
	}
	if hc.Timeout <= 0 {
		hc.Timeout = DefaultTimeout
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: &hc}
}

// Charge asks the provider to charge req under the idempotency key. It
// returns the succeeded charge, or an error that is a *DeclinedError, wraps
// ErrNotCharged or ErrOutcomeUnknown, matches ErrRejected (a *StatusError for
// a request the provider refused as wrong), or is anything else for a call
// that was wrong (a *StatusError for another 4xx); see the package
// documentation.
func (c *Client) Charge(ctx context.Context, key string, req ChargeRequest) (Charge, error) {
	ch, err := c.charge(ctx, key, req)
	if err != nil {
		return Charge{}, fmt.Errorf("provider: charge: %w", err)
	}
	return ch, nil
}

func (c *Client) charge(ctx context.Context, key string, req ChargeRequest) (Charge, error) {
	a, err := c.post(ctx, "/v1/charges", key, req, ErrNotCharged)
	if err != nil {
		return Charge{}, err
	}
	switch s := a.status; {
	case s == http.StatusServiceUnavailable || s == http.StatusTooManyRequests:
		return Charge{}, fmt.Errorf("%w: status %d", ErrNotCharged, s)
	case s >= 200 && s < 300:
		if a.readErr != nil {
			return Charge{}, fmt.Errorf("%w: status %d: reading the answer: %w", ErrOutcomeUnknown, s, a.readErr)
		}
		ch, err := parseCharge(a.body)
		if err != nil {
			return Charge{}, fmt.Errorf("%w: status %d: %w", ErrOutcomeUnknown, s, err)
		}
		if ch.key != "" && ch.key != key {
			return Charge{}, fmt.Errorf("%w: status %d: the answer is the charge of another key", ErrOutcomeUnknown, s)
		}
		switch ch.Status {
		case StatusSucceeded:
			return ch.Charge, nil
		case StatusFailed:
			return Charge{}, &DeclinedError{Code: ch.FailureCode, Charge: ch.Charge}
		}
		return Charge{}, fmt.Errorf("%w: status %d: charge status %q", ErrOutcomeUnknown, s, ch.Status)
	case s == http.StatusPaymentRequired:
		if a.readErr != nil {
			return Charge{}, fmt.Errorf("%w: status %d: reading the answer: %w", ErrOutcomeUnknown, s, a.readErr)
		}
		e, ok := parseError(a.body)
		if !ok || e.Charge == "" {
			return Charge{}, fmt.Errorf("%w: status %d: the answer names no failed charge", ErrOutcomeUnknown, s)
		}
		return Charge{}, &DeclinedError{Code: e.Code, Message: e.Message, Charge: Charge{
			ID: e.Charge, Status: StatusFailed, Amount: req.Amount, Currency: req.Currency, FailureCode: e.Code,
		}}
	case s >= 400 && s < 500:
		return Charge{}, statusError(s, a.body)
	default:
		return Charge{}, fmt.Errorf("%w: status %d", ErrOutcomeUnknown, s)
	}
}

// answer is the provider's answer to a call: its status and body, and the
// error that cut the body short, if any.
type answer struct {
	status  int
	body    []byte
	readErr error
}

// post sends req as JSON to path under the idempotency key. It returns an
// error wrapping notSent (with its cause) when provably nothing of the
// request was written, one wrapping ErrOutcomeUnknown when it may have been
// and no answer came, and a plain error when it could not be sent at all.
func (c *Client) post(ctx context.Context, path, key string, req any, notSent error) (answer, error) {
	if key == "" {
		return answer{}, errors.New("the idempotency key is empty")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return answer{}, err
	}
	// Any part of the request written means it may have reached the
	// provider. Both write hooks run before the bytes are flushed to the
	// connection; over HTTP/1 Do returns only after they ran. Over HTTP/2 a
	// cancelled or timed-out Do returns without waiting for the writer, so
	// a cancellation once a connection was obtained counts as written.
	var gotConn, written atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { gotConn.Store(true) },
		WroteHeaders: func() { written.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { written.Store(true) },
	}
	hreq, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace),
		http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Idempotency-Key", key)

	resp, err := c.hc.Do(hreq)
	if err != nil {
		if written.Load() || (gotConn.Load() && interrupted(ctx, err)) {
			return answer{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return answer{}, fmt.Errorf("%w: %w", notSent, err)
	}
	defer resp.Body.Close()
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	return answer{status: resp.StatusCode, body: raw, readErr: readErr}, nil
}

// get reads path (with its query) and returns the answer's status and body.
func (c *Client) get(ctx context.Context, path string) (int, []byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	hreq.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, fmt.Errorf("status %d: reading the answer: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, raw, nil
}

// interrupted reports whether err ended a call early: ctx was done or a
// timeout struck.
func interrupted(ctx context.Context, err error) bool {
	var ne net.Error
	return ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// Lookup returns the charge (succeeded or failed) that the provider made
// under the idempotency key, or an error wrapping ErrNoCharge when it made
// none. Any other failure is a plain error (a *StatusError for an
// unexpected answer): look up again later.
func (c *Client) Lookup(ctx context.Context, key string) (Charge, error) {
	ch, err := c.lookup(ctx, key)
	if err != nil {
		return Charge{}, fmt.Errorf("provider: lookup: %w", err)
	}
	return ch, nil
}

func (c *Client) lookup(ctx context.Context, key string) (Charge, error) {
	if key == "" {
		return Charge{}, errors.New("the idempotency key is empty")
	}
	status, raw, err := c.get(ctx, "/v1/charges?idempotency_key="+url.QueryEscape(key))
	if err != nil {
		return Charge{}, err
	}
	switch status {
	case http.StatusOK:
		ch, err := parseCharge(raw)
		if err != nil {
			return Charge{}, err
		}
		if ch.key != "" && ch.key != key {
			return Charge{}, errors.New("the provider answered with the charge of another key")
		}
		if ch.Status != StatusSucceeded && ch.Status != StatusFailed {
			return Charge{}, fmt.Errorf("charge %s has status %q", ch.ID, ch.Status)
		}
		return ch.Charge, nil
	case http.StatusNotFound:
		// Only the provider's own "no such charge" proves anything: a 404
		// from a wrong base URL or a gateway must not read as "not charged".
		if e, ok := parseError(raw); ok && e.Code == "resource_missing" {
			return Charge{}, ErrNoCharge
		}
	}
	return Charge{}, statusError(status, raw)
}

// chargeJSON is the provider's charge object.
type chargeJSON struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Created        int64  `json:"created"`
	IdempotencyKey string `json:"idempotency_key"`
	FailureCode    string `json:"failure_code"`
}

// parsedCharge is a Charge with the key the provider filed it under.
type parsedCharge struct {
	Charge
	key string
}

func parseCharge(raw []byte) (parsedCharge, error) {
	var j chargeJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return parsedCharge{}, fmt.Errorf("the answer is not a charge: %w", err)
	}
	if j.ID == "" || (j.Object != "" && j.Object != "charge") {
		return parsedCharge{}, errors.New("the answer is not a charge")
	}
	ch := Charge{ID: j.ID, Status: j.Status, Amount: j.Amount, Currency: j.Currency, FailureCode: j.FailureCode}
	if j.Created > 0 {
		ch.Created = time.Unix(j.Created, 0).UTC()
	}
	return parsedCharge{Charge: ch, key: j.IdempotencyKey}, nil
}

// apiError is the provider's error object, the body of its error answers
// as {"error": {...}}.
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Charge  string `json:"charge"`
}

func parseError(raw []byte) (apiError, bool) {
	var j struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return apiError{}, false
	}
	return j.Error, j.Error.Code != ""
}

func statusError(status int, raw []byte) *StatusError {
	e, _ := parseError(raw)
	return &StatusError{StatusCode: status, Code: e.Code, Message: e.Message}
}
