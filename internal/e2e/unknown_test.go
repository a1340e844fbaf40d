package e2e

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// failCompletion is an HTTP client for the DynamoDB SDK that fails every
// call of the operation op (PutItem, TransactWriteItems) writing a COMPLETED
// record, as an outage that starts between the provider's answer and its
// recording would.
type failCompletion struct {
	op   string
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
}

// failing returns a stack option whose function client fails as
// failCompletion{op} does.
func failing(op string) stackOption {
	return func(setup *stackSetup) {
		setup.client = func(t testing.TB, base *dynamodb.Client) *dynamodb.Client {
			return dynamodb.New(base.Options(), func(o *dynamodb.Options) {
				o.HTTPClient = failCompletion{op: op, next: o.HTTPClient}
				o.RetryMaxAttempts = 2
			})
		}
	}
}

func (d failCompletion) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), "."+d.op) && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		// The item's status, not a condition's :completed value (a
		// reservation's condition names it too).
		if bytes.Contains(body, []byte(`"status":{"S":"COMPLETED"}`)) {
			return nil, errors.New("injected: connection reset while completing")
		}
	}
	return d.next.Do(r)
}

// TestChargeCompletionUnrecorded: the provider charged but the answer could
// not be stored. The client is told the truth (the charge's 201, not stored)
// rather than "store unavailable", the reservation stays for the reconciler,
// and the answer the reconciler will rebuild is the same bytes.
func TestChargeCompletionUnrecorded(t *testing.T) {
	s := newStack(t, withConfig(func(c *config.Config) { c.ProviderTimeout = chargeTimeout }), failing("PutItem"))
	const key = "charge-unrecorded"
	body := chargeBody("tok_visa")
	first := s.charge(t, key, body, nil)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("POST = %d (replayed %q) %s, want the charge's 201, not replayed", first.status, first.header.Get("Idempotent-Replayed"), first.body)
	}
	rec, err := s.record(t, key)
	wantStatus(t, key, rec, err, idempotency.StatusInProgress)
	if n := s.charged(t, key, body); n != 1 {
		t.Errorf("simulator charges = %d, want 1", n)
	}
	if _, resp := s.rebuilt(t, key); !bytes.Equal(resp.Body, first.body) || resp.Status != first.status {
		t.Errorf("the reconciler would store %d %s, the client got %d %s", resp.Status, resp.Body, first.status, first.body)
	}
	if lines := s.logs.Lines(t); len(lines) != 1 || lines[0]["outcome"] != idempotency.OutcomeStoreError {
		t.Errorf("log lines = %v, want one store_error line", lines)
	}
	// Within the lease a retry waits; the engine never executes it again.
	wantProblem(t, s.charge(t, key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "30")
}

// TestUnknownRedrive: a record left UNKNOWN longer than the redrive interval
// (its reconciliation went to the on-failure queue) is announced to the
// reconciler again by the next retry: a new lease token, which is a stream
// MODIFY to UNKNOWN; at most once per interval. A redrive keeps the record
// at least the retention from then (its expiry extended, never shortened),
// past its retention too, so that TTL does not delete a record still
// retried.
func TestUnknownRedrive(t *testing.T) {
	s := newStack(t, withConfig(func(c *config.Config) { c.ProviderTimeout = chargeTimeout }))
	const key = "charge-stuck"
	body := chargeBody("tok_timeout")
	wantProblem(t, s.charge(t, key, body, nil), http.StatusGatewayTimeout, "provider_outcome_unknown", "2")
	marked, err := s.record(t, key)
	wantStatus(t, key, marked, err, idempotency.StatusUnknown)

	steps := []struct {
		name    string
		advance time.Duration
		redrive bool
	}{
		{"within the interval", 0, false},
		{"after the interval", idempotency.DefaultUnknownRedrive, true},
		{"again within the new interval", 0, false},
		{"after the next interval", idempotency.DefaultUnknownRedrive, true},
		{"past its retention", s.cfg.Retention + idempotency.DefaultUnknownRedrive, true},
	}
	prev := marked
	for _, step := range steps {
		s.clock.Advance(step.advance)
		wantProblem(t, s.charge(t, key, body, nil), http.StatusConflict, "idempotency_request_in_progress", "2")
		got, err := s.record(t, key)
		wantStatus(t, key, got, err, idempotency.StatusUnknown)
		if redriven := got.LeaseToken != prev.LeaseToken; redriven != step.redrive {
			t.Errorf("%s: lease token changed = %v, want %v", step.name, redriven, step.redrive)
		}
		if step.redrive && (!got.UpdatedAt.Equal(s.clock.Now().Truncate(1e6)) || got.Fingerprint != marked.Fingerprint || !bytes.Equal(got.Request, marked.Request)) {
			t.Errorf("%s: record = updated %v fingerprint %s; want updated now (%v) and the same request", step.name, got.UpdatedAt, got.Fingerprint, s.clock.Now())
		}
		want := prev.ExpiresAt
		if step.redrive {
			want = s.clock.Now().Add(s.cfg.Retention).Truncate(time.Millisecond)
		}
		if !got.ExpiresAt.Equal(want) {
			t.Errorf("%s: expires %v, want %v", step.name, got.ExpiresAt, want)
		}
		prev = got
	}
	if n := s.charged(t, key, body); n != 1 {
		t.Errorf("simulator charges = %d, want 1", n)
	}
}

// TestChargeReleasedAndUnrecorded: the reservation was released while the
// request ran (reconciled as "nothing happened"), and recording the outcome
// afresh fails too. Nothing would reconcile an answer sent now, so the client
// gets 503 store_unavailable and retries instead: the retry runs, and the
// provider answers it with the same charge.
func TestChargeReleasedAndUnrecorded(t *testing.T) {
	// The completion meets the released record; the fresh commit fails.
	s := newStack(t, withConfig(func(c *config.Config) { c.ProviderTimeout = chargeTimeout }), failing("TransactWriteItems"))
	const key = "charge-released"
	body := chargeBody("tok_slow") // the simulator answers after 300ms
	done := make(chan response, 1)
	go func() { done <- s.charge(t, key, body, nil) }()
	lambdatest.WaitFor(t, 5*time.Second, "the reservation", func() bool {
		rec, err := s.record(t, key)
		return err == nil && rec.Status == idempotency.StatusInProgress
	})
	dynamotest.Delete(t, s.client, s.names.ByLogicalID["IdempotencyTable"], idempotency.NewKey("acme", key).ID())
	r := <-done
	wantProblem(t, r, http.StatusServiceUnavailable, "store_unavailable", "1")
	if _, err := s.record(t, key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record = %v, want none", err)
	}
	if n := s.charged(t, key, body); n != 1 {
		t.Errorf("simulator charges = %d, want 1", n)
	}
}
