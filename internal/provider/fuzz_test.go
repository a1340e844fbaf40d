package provider

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

// answering is a RoundTripper that answers every request with one status
// and body, as the provider (or whatever stands at its URL) might.
type answering struct {
	status int
	body   []byte
}

func (a answering) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		StatusCode: a.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(a.body)), ContentLength: int64(len(a.body)), Request: req,
	}, nil
}

// FuzzAnswer checks the client's reading of the provider's answers, any
// status and body (parseCharge, parseError, parseRefund and the outcomes
// built on them): it never panics; a charge (or refund) it returns has an
// ID and a final status; "not charged" (and "not refunded") comes only from
// a 503 or 429, never from an answer it could not read, and "no charge" (and
// "no refund") only from the provider's own 404 resource_missing; a decline
// names its failed charge; every other failure is a *StatusError (a 4xx) or
// an unknown outcome.
func FuzzAnswer(f *testing.F) {
	for _, seed := range []struct {
		status int
		body   string
	}{
		{200, `{"id":"ch_1","object":"charge","status":"succeeded","amount":2500,"currency":"eur","created":1764086400,"idempotency_key":"k1"}`},
		{200, `{"id":"ch_1","object":"charge","status":"failed","amount":2500,"currency":"eur","failure_code":"card_declined"}`},
		{200, `{"id":"ch_1","object":"charge","status":"pending"}`},
		{200, `{"id":"ch_1","status":"succeeded","idempotency_key":"k2"}`},
		{200, `{"id":"","object":"charge","status":"succeeded"}`},
		{200, `{"id":"ch_1","object":"refund","status":"succeeded"}`},
		{201, `{"id":"re_1","object":"refund","status":"succeeded","amount":5,"currency":"eur","charge":"ch_1","created":1764086400,"idempotency_key":"k1"}`},
		{200, `{"id":"re_1","object":"refund","status":"pending","charge":"ch_1"}`},
		{200, `{"object":"list","data":[{"id":"re_1","object":"refund","status":"succeeded","charge":"ch_1"}],"has_more":true}`},
		{200, `{"object":"list","data":[{"id":"re_1","object":"refund","status":"failed"}]}`},
		{200, `{"id":"ch_1","object":"charge","status":"succeeded","amount":1e30}`},
		{200, `{"id":"ch_1","object":"charge","status":"succeeded","created":-1}`},
		{200, ``}, {200, `{`}, {200, `null`}, {200, `[]`},
		{402, `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined.","charge":"ch_1"}}`},
		{402, `{"error":{"type":"card_error","code":"card_declined"}}`},
		{404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such charge"}}`},
		{404, `<html>Not Found</html>`},
		{400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid","message":"amount"}}`},
		{409, `{"error":{"code":"idempotency_key_in_use"}}`},
		{413, ``}, {422, `{"error":{"code":"idempotency_error"}}`}, {429, ``}, {503, `{"error":{}}`},
		{500, `{"id":"ch_1","object":"charge","status":"succeeded"}`}, {302, ``}, {100, ``}, {599, `x`},
	} {
		f.Add(uint16(seed.status), []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, code uint16, body []byte) {
		status := 100 + int(code)%500
		c := New("http://provider.invalid", &http.Client{Transport: answering{status, body}})
		ctx := t.Context()
		e, ok := parseError(body)
		notFound := status == http.StatusNotFound && ok && e.Code == "resource_missing"
		if ok && e.Code == "" {
			t.Fatalf("parseError(%q) = %+v, true; want an error with a code", body, e)
		}
		if pc, err := parseCharge(body); err == nil && (pc.ID == "" || pc.Created.Location() != time.UTC || !pc.Created.IsZero() && pc.Created.Unix() <= 0) {
			t.Fatalf("parseCharge(%q) = %+v; want a charge with an ID, created at a positive UTC time or zero", body, pc)
		}

		ch, err := c.Charge(ctx, "k1", ChargeRequest{Amount: 2500, Currency: "eur", Source: "tok_visa", Customer: "c"})
		var declined *DeclinedError
		var serr *StatusError
		switch {
		case err == nil:
			if ch.ID == "" || ch.Status != StatusSucceeded || status/100 != 2 {
				t.Fatalf("Charge answered %d %q = %+v; want a succeeded charge with an ID from a 2xx", status, body, ch)
			}
		case errors.As(err, &declined):
			if declined.Charge.ID == "" || declined.Charge.Status != StatusFailed || status/100 != 2 && status != http.StatusPaymentRequired {
				t.Fatalf("Charge answered %d %q: decline %+v; want a failed charge with an ID from a 2xx or 402", status, body, declined)
			}
		case errors.Is(err, ErrNotCharged):
			if status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
				t.Fatalf("Charge answered %d %q: %v; not charged from neither 503 nor 429", status, body, err)
			}
		case errors.As(err, &serr):
			if status/100 != 4 || serr.StatusCode != status || errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("Charge answered %d %q: %v; a *StatusError only for a 4xx", status, body, err)
			}
		case !errors.Is(err, ErrOutcomeUnknown):
			t.Fatalf("Charge answered %d %q: %v (%T); not an outcome the package documents", status, body, err, err)
		}

		ch, err = c.Lookup(ctx, "k1")
		switch {
		case err == nil:
			if ch.ID == "" || ch.Status != StatusSucceeded && ch.Status != StatusFailed || status != http.StatusOK {
				t.Fatalf("Lookup answered %d %q = %+v; want a final charge with an ID from a 200", status, body, ch)
			}
		case errors.Is(err, ErrNoCharge) != notFound:
			t.Fatalf("Lookup answered %d %q: %v; no charge %v, want %v (only the provider's 404 resource_missing)", status, body, err, errors.Is(err, ErrNoCharge), notFound)
		}

		r, err := c.Refund(ctx, "k1", RefundRequest{Charge: "ch_1", Amount: 5})
		switch {
		case err == nil:
			if r.ID == "" || r.Status != StatusSucceeded || status/100 != 2 {
				t.Fatalf("Refund answered %d %q = %+v; want a succeeded refund with an ID from a 2xx", status, body, r)
			}
		case errors.Is(err, ErrNotRefunded):
			if status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
				t.Fatalf("Refund answered %d %q: %v; not refunded from neither 503 nor 429", status, body, err)
			}
		case errors.As(err, &serr):
			if status/100 != 4 || serr.StatusCode != status || errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("Refund answered %d %q: %v; a *StatusError only for a 4xx", status, body, err)
			}
		case !errors.Is(err, ErrOutcomeUnknown):
			t.Fatalf("Refund answered %d %q: %v (%T); not an outcome the package documents", status, body, err, err)
		}

		r, err = c.LookupRefund(ctx, "k1")
		switch {
		case err == nil:
			if r.ID == "" || r.Status != StatusSucceeded || status != http.StatusOK {
				t.Fatalf("LookupRefund answered %d %q = %+v; want a succeeded refund with an ID from a 200", status, body, r)
			}
		case errors.Is(err, ErrNoRefund) != notFound:
			t.Fatalf("LookupRefund answered %d %q: %v; no refund %v, want %v (only the provider's 404 resource_missing)", status, body, err, errors.Is(err, ErrNoRefund), notFound)
		}

		refunds, _, err := c.Refunds(ctx, "ch_1")
		if err == nil {
			if status != http.StatusOK {
				t.Fatalf("Refunds answered %d %q = %+v; want them only from a 200", status, body, refunds)
			}
			for _, r := range refunds {
				if r.ID == "" || r.Status != StatusSucceeded {
					t.Fatalf("Refunds answered %d %q: refund %+v; want a succeeded refund with an ID", status, body, r)
				}
			}
		}
	})
}
