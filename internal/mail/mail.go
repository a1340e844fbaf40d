package mail

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds a call when the http.Client given to New has no
// Timeout.
const DefaultTimeout = 5 * time.Second

// Outcomes of Send, always returned wrapped.
var (
	// ErrNotSent: provably nothing was sent (the request never left, or the
	// API answered 503 or 429).
	ErrNotSent = errors.New("not sent")
	// ErrOutcomeUnknown: the request may have reached the API and no usable
	// answer came: the message may have been sent.
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

// StatusError is an answer that is neither a success nor ErrNotSent: the
// API refused the message (another 4xx) or failed (5xx, counted as
// ErrOutcomeUnknown by Send).
type StatusError struct {
	// StatusCode is the HTTP status; Code the API's error code, if any.
	StatusCode int
	Code       string
}

// Error describes the answer by its status and code.
func (e *StatusError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("status %d", e.StatusCode)
	}
	return fmt.Sprintf("status %d: %s", e.StatusCode, e.Code)
}

// Message is one e-mail: POST /v1/messages's body.
type Message struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
	// Order names the order the message is about.
	Order string `json:"order"`
}

// Client calls the mail API. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// New returns a client of the mail API at baseURL (the URL "/v1/messages"
// is appended to). httpClient's Timeout bounds a call (DefaultTimeout when
// zero; nil means a default client).
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

// Send sends m once and returns the API's message ID, or an error that
// wraps ErrNotSent or ErrOutcomeUnknown, or is a *StatusError.
func (c *Client) Send(ctx context.Context, m Message) (string, error) {
	id, err := c.send(ctx, m)
	if err != nil {
		return "", fmt.Errorf("mail: send: %w", err)
	}
	return id, nil
}

func (c *Client) send(ctx context.Context, m Message) (string, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	// Once any byte of the request is written, it may have been sent.
	var written atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteHeaders: func() { written.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { written.Store(true) },
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, c.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		if written.Load() {
			return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return "", fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	defer resp.Body.Close()
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var answer struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &answer)
	switch s := resp.StatusCode; {
	case s == http.StatusServiceUnavailable || s == http.StatusTooManyRequests:
		return "", fmt.Errorf("%w: %w", ErrNotSent, &StatusError{StatusCode: s, Code: answer.Error.Code})
	case s >= 200 && s < 300 && readErr == nil && answer.ID != "":
		return answer.ID, nil
	case s >= 200 && s < 300:
		return "", fmt.Errorf("%w: status %d without a message", ErrOutcomeUnknown, s)
	case s >= 400 && s < 500:
		return "", &StatusError{StatusCode: s, Code: answer.Error.Code}
	default:
		return "", fmt.Errorf("%w: %w", ErrOutcomeUnknown, &StatusError{StatusCode: s, Code: answer.Error.Code})
	}
}
