// Package events_test holds the event files of events/ to the code.
//
// Each file is an event as AWS sends it to one function, named
// <function>-<case>.json (api-*, authorizer-*, worker-*, sweeper-*,
// reconciler-*, checker-*, auditor-*, retrier-*, receipts-*, resender-*,
// provider-*),
// for `sam local invoke -e events/<file>.json <LogicalId>`.
// TestEvents feeds every file to its function's handler, built as
// functions/<name>/main.go builds it and invoked through lambda.NewHandler
// (so the file is decoded exactly as the Lambda runtime decodes it), against
// DynamoDB Local tables made from template.yaml and the provider simulator,
// and checks the outcome. A file without a case fails TestEveryFileHasACase.
// The other tests hold the files to template.yaml (routes, stream filters,
// table names) and to the code that derives keys, hashes and item formats.
package events_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/charges"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/worker"
)

// fixture is one file of events/ and what feeding it to its function does.
type fixture struct {
	// origin, for an event of the idempotency table's stream, is the request
	// its records' images were made from: their pk, fingerprint and request
	// must be derived from it as the code derives them.
	origin *origin
	// poison lists the records (by index) whose images are deliberately not
	// payments.
	poison []int
	// legacy lists the records (by index) whose images are idempotency
	// items written before External reservations lost their TTL attribute:
	// they carry expires_at (the lease deadline plus
	// dynamo.ExternalReservationTTL), as only such an External reservation
	// is deleted by TTL.
	legacy []int
	// run feeds the file, after whatever it follows, to a fresh stack and
	// checks the outcome.
	run func(t *testing.T, s *stack, file string)
}

// origin is the request behind an idempotency record.
type origin struct {
	tenant, key, body string
}

// fixtures are the cases, by file name.
var fixtures = map[string]fixture{
	// The api function behind API Gateway's REST API (payload 1.0), and one
	// HTTP API event (payload 2.0).
	"api-create-payment.json": {run: func(t *testing.T, s *stack, file string) {
		checkPaymentCreated(t, s, file, s.api(t, file))
	}},
	"api-replay-payment.json": {run: func(t *testing.T, s *stack, file string) {
		first := s.api(t, "api-create-payment.json")
		got := s.api(t, file)
		if got.StatusCode != first.StatusCode || got.Body != first.Body {
			t.Errorf("replay = %d %s, want the first answer %d %s", got.StatusCode, got.Body, first.StatusCode, first.Body)
		}
		if h := got.header(idempotency.ReplayedHeader); h != "true" {
			t.Errorf("replay %s = %q, want true", idempotency.ReplayedHeader, h)
		}
		if got, want := got.header("Location"), first.header("Location"); got != want {
			t.Errorf("replay Location = %q, want %q", got, want)
		}
		if n := s.count(t, s.names.ByLogicalID["PaymentsTable"]); n != 1 {
			t.Errorf("payments after the replay = %d, want 1", n)
		}
	}},
	"api-mismatch-payment.json": {run: func(t *testing.T, s *stack, file string) {
		first := s.api(t, "api-create-payment.json")
		got := s.api(t, file)
		if got.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("status = %d, want 422", got.StatusCode)
		}
		if code := got.problemCode(t); code != "idempotency_key_reused" {
			t.Errorf("code = %q, want idempotency_key_reused", code)
		}
		if n := s.count(t, s.names.ByLogicalID["PaymentsTable"]); n != 1 {
			t.Errorf("payments after the mismatch = %d, want 1", n)
		}
		req := apiRequestOf(t, file)
		rec, err := s.store().Get(t.Context(), idempotency.NewKey(req.tenant, req.key))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Response == nil || string(rec.Response.Body) != first.Body {
			t.Errorf("stored response after the mismatch = %+v, want the first answer %s", rec.Response, first.Body)
		}
	}},
	"api-missing-key.json": {run: func(t *testing.T, s *stack, file string) {
		got := s.api(t, file)
		if got.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d, want 400", got.StatusCode)
		}
		if code := got.problemCode(t); code != "idempotency_key_missing" {
			t.Errorf("code = %q, want idempotency_key_missing", code)
		}
		for _, table := range []string{s.names.ByLogicalID["PaymentsTable"], s.names.ByLogicalID["IdempotencyTable"]} {
			if n := s.count(t, table); n != 0 {
				t.Errorf("items in %s = %d, want 0", table, n)
			}
		}
	}},
	"api-other-tenant.json": {run: func(t *testing.T, s *stack, file string) {
		first := checkPaymentCreated(t, s, "api-create-payment.json", s.api(t, "api-create-payment.json"))
		other := checkPaymentCreated(t, s, file, s.api(t, file))
		if other.Tenant == first.Tenant || other.ID == first.ID {
			t.Errorf("other tenant's payment = %s of %s, want another tenant's own payment than %s of %s",
				other.ID, other.Tenant, first.ID, first.Tenant)
		}
		if n := s.count(t, s.names.ByLogicalID["PaymentsTable"]); n != 2 {
			t.Errorf("payments = %d, want 2", n)
		}
	}},
	"api-get-payment-not-found.json": {run: func(t *testing.T, s *stack, file string) {
		checkPaymentCreated(t, s, "api-create-payment.json", s.api(t, "api-create-payment.json"))
		got := s.api(t, file)
		if got.StatusCode != http.StatusNotFound {
			t.Errorf("status = %d, want 404", got.StatusCode)
		}
		if code := got.problemCode(t); code != "not_found" {
			t.Errorf("code = %q, want not_found", code)
		}
	}},
	"api-create-charge.json": {run: func(t *testing.T, s *stack, file string) {
		got := s.api(t, file)
		if got.StatusCode != http.StatusCreated {
			t.Fatalf("status = %d %s, want 201", got.StatusCode, got.Body)
		}
		var body struct {
			ID               string `json:"id"`
			Object           string `json:"object"`
			Amount           int64  `json:"amount"`
			Currency         string `json:"currency"`
			Status           string `json:"status"`
			ProviderChargeID string `json:"provider_charge_id"`
		}
		if err := json.Unmarshal([]byte(got.Body), &body); err != nil {
			t.Fatalf("body %s: %v", got.Body, err)
		}
		req := apiRequestOf(t, file)
		key := idempotency.NewKey(req.tenant, req.key)
		want, err := charges.Decode([]byte(req.body))
		if err != nil {
			t.Fatal(err)
		}
		if body.ID != charges.ID(key, body.ProviderChargeID) || body.Object != "charge" || body.Status != "succeeded" ||
			body.Amount != want.Amount || body.Currency != want.Currency {
			t.Errorf("charge = %+v, want %s, a succeeded charge of %d %s", body, charges.ID(key, body.ProviderChargeID), want.Amount, want.Currency)
		}
		fp, err := idempotency.RequestFingerprint(http.MethodPost, charges.Route, []byte(req.body))
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.provider.Lookup(t.Context(), key.Forward(fp))
		if err != nil {
			t.Fatalf("provider lookup of the forwarded key: %v", err)
		}
		if body.ProviderChargeID != c.ID {
			t.Errorf("provider_charge_id = %q, want the provider's charge %q", body.ProviderChargeID, c.ID)
		}
		if n := s.charges(t, key.Forward(fp)); n != 1 {
			t.Errorf("provider charges under the forwarded key = %d, want 1", n)
		}
		checkRecordAnswer(t, s, key, got)
	}},
	"api-v2-create-payment.json": {run: func(t *testing.T, s *stack, file string) {
		checkPaymentCreated(t, s, file, s.api(t, file))
	}},

	// POST /v1/orders and GET /v1/orders/{id} (orders_test.go).
	"api-create-order.json": {run: runCreateOrder},
	"api-get-order.json":    {run: runGetOrder},

	// The REQUEST authorizer.
	"authorizer-valid-key.json": {run: func(t *testing.T, s *stack, file string) {
		s.seedKeys(t)
		got, err := s.authorize(t, file)
		if err != nil {
			t.Fatalf("authorizer error = %v, want an Allow policy", err)
		}
		want := events.APIGatewayCustomAuthorizerResponse{
			PrincipalID: "acme",
			PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
				Version: "2012-10-17",
				Statement: []events.IAMPolicyStatement{{
					Action:   []string{"execute-api:Invoke"},
					Effect:   "Allow",
					Resource: []string{"arn:aws:execute-api:us-east-1:123456789012:k3v9x2m7qa/prod/*/*"},
				}},
			},
			Context: map[string]any{auth.ContextTenant: "acme"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("authorizer response mismatch (-want +got):\n%s", diff)
		}
	}},
	"authorizer-unknown-key.json": {run: func(t *testing.T, s *stack, file string) {
		s.seedKeys(t)
		got, err := s.authorize(t, file)
		if err != nil {
			t.Fatalf("authorizer error = %v, want a Deny policy (API Gateway's 403)", err)
		}
		want := events.APIGatewayCustomAuthorizerResponse{
			PrincipalID: "unknown",
			PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
				Version: "2012-10-17",
				Statement: []events.IAMPolicyStatement{{
					Action:   []string{"execute-api:Invoke"},
					Effect:   "Deny",
					Resource: []string{"arn:aws:execute-api:us-east-1:123456789012:k3v9x2m7qa/prod/*/*"},
				}},
			},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("authorizer response mismatch (-want +got):\n%s", diff)
		}
	}},
	"authorizer-missing-key.json": {run: func(t *testing.T, s *stack, file string) {
		s.seedKeys(t)
		got, err := s.authorize(t, file)
		// The runtime reports err.Error() as the errorMessage; API Gateway
		// answers 401 for exactly "Unauthorized".
		if err == nil || err.Error() != "Unauthorized" {
			t.Errorf("authorizer = %+v, %v; want the error Unauthorized (API Gateway's 401)", got, err)
		}
	}},

	// The worker, on the payments table's stream.
	"worker-pending-payment.json": {run: func(t *testing.T, s *stack, file string) {
		p := paymentImage(t, streamEvent(t, file).Records[0])
		key := worker.ChargeKey(p.Tenant, p.ID)
		// The second invocation is a redelivery of the same batch: the
		// payment is charged and settled once.
		for i := range 2 {
			var resp events.DynamoDBEventResponse
			if i == 0 {
				resp = s.stream(t, workerFunction, file)
			} else {
				out, err := s.invoke(t, workerFunction, file)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(out, &resp); err != nil {
					t.Fatal(err)
				}
			}
			if len(resp.BatchItemFailures) != 0 {
				t.Fatalf("delivery %d: batch item failures = %v, want none", i+1, resp.BatchItemFailures)
			}
			checkSettled(t, s, p)
		}
		if n := s.charges(t, key); n != 1 {
			t.Errorf("provider charges under %q = %d, want 1", key, n)
		}
		if n := strings.Count(s.metrics[workerFunction].String(), `"worker_charged":1`); n != 1 {
			t.Errorf("worker_charged counted %d times, want 1", n)
		}
	}},
	"worker-batch-with-poison.json": {poison: []int{1}, run: func(t *testing.T, s *stack, file string) {
		recs := streamEvent(t, file).Records
		before, after := paymentImage(t, recs[0]), paymentImage(t, recs[2])
		resp := s.stream(t, workerFunction, file)
		// stream.Process stops at the poison record and reports it and every
		// later record, so that Lambda retries from it in order.
		want := []events.DynamoDBBatchItemFailure{
			{ItemIdentifier: recs[1].Change.SequenceNumber},
			{ItemIdentifier: recs[2].Change.SequenceNumber},
		}
		if diff := cmp.Diff(want, resp.BatchItemFailures); diff != "" {
			t.Errorf("batch item failures mismatch (-want +got):\n%s", diff)
		}
		checkSettled(t, s, before)
		if n := s.charges(t, worker.ChargeKey(before.Tenant, before.ID)); n != 1 {
			t.Errorf("provider charges for the record before the poison = %d, want 1", n)
		}
		if got := s.payment(t, after.Tenant, after.ID); got.Status != payments.StatusPending {
			t.Errorf("payment after the poison = %s, want pending (redelivered, not applied out of order)", got.Status)
		}
		if n := s.charges(t, worker.ChargeKey(after.Tenant, after.ID)); n != 0 {
			t.Errorf("provider charges for the record after the poison = %d, want 0", n)
		}
	}},

	// The sweeper, on the idempotency table's stream.
	"sweeper-ttl-remove-external.json": {
		origin: &origin{"acme", "charge-7", `{"amount": 4200, "currency": "EUR", "customer": "cus_7", "description": "Order 1007", "source": "tok_visa"}`},
		legacy: []int{0},
		run: func(t *testing.T, s *stack, file string) {
			rec := streamEvent(t, file).Records[0]
			old := recordImage(t, rec.Change.OldImage)
			if !stream.NewChange(rec).ByTTL() || !old.External {
				t.Fatalf("%s: want a TTL removal of an External reservation", file)
			}
			start := time.Now()
			if resp := s.stream(t, sweeperFunction, file); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
			}
			got, err := s.store().Get(t.Context(), old.Key)
			if err != nil {
				t.Fatalf("the restored record: %v", err)
			}
			want := old
			want.Status = idempotency.StatusUnknown
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(idempotency.Record{}, "LeaseToken", "ExpiresAt", "UpdatedAt", "UnknownSince")); diff != "" {
				t.Errorf("restored record mismatch (-want +got):\n%s", diff)
			}
			// An abandoned reservation is UNKNOWN from its restore on.
			if !got.UnknownSince.Equal(got.UpdatedAt) || got.UnknownSince.Before(start.Truncate(time.Millisecond)) {
				t.Errorf("restored record UNKNOWN since %v (updated %v), want its restore's time, after %v", got.UnknownSince, got.UpdatedAt, start)
			}
			if got.LeaseToken == "" || got.LeaseToken == old.LeaseToken {
				t.Errorf("restored lease token = %q, want a new one (old %q)", got.LeaseToken, old.LeaseToken)
			}
			if !got.ExpiresAt.After(start) {
				t.Errorf("restored record expires at %v, want after %v", got.ExpiresAt, start)
			}
			checkMetrics(t, s, sweeperFunction, []string{`"zombie_swept":1`, `"reconcile_scheduled":1`}, nil)
		},
	},
	"sweeper-ttl-remove-atomic.json": {
		origin: &origin{"acme", "order-1003", `{"amount": 990, "currency": "EUR", "customer": "cus_42", "description": "Order 1003"}`},
		run: func(t *testing.T, s *stack, file string) {
			rec := streamEvent(t, file).Records[0]
			old := recordImage(t, rec.Change.OldImage)
			if !stream.NewChange(rec).ByTTL() || old.External {
				t.Fatalf("%s: want a TTL removal of a reservation that is not External", file)
			}
			if resp := s.stream(t, sweeperFunction, file); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
			}
			if _, err := s.store().Get(t.Context(), old.Key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after the sweep: Get error = %v, want ErrNotFound (the key stays free)", err)
			}
			checkMetrics(t, s, sweeperFunction, []string{`"zombie_swept":1`}, []string{"reconcile_scheduled"})
		},
	},
	"sweeper-release.json": {
		origin: &origin{"acme", "charge-3", `{"amount": 1500, "currency": "USD", "customer": "cus_42", "source": "tok_unavailable"}`},
		run: func(t *testing.T, s *stack, file string) {
			rec := streamEvent(t, file).Records[0]
			old := recordImage(t, rec.Change.OldImage)
			// External, so that a release taken for a TTL deletion would
			// show as a restored UNKNOWN record.
			if stream.NewChange(rec).ByTTL() || !old.External || !rec.Change.ApproximateCreationDateTime.Before(old.ExpiresAt) {
				t.Fatalf("%s: want a removal of an External reservation within its lease, without the TTL identity", file)
			}
			if resp := s.stream(t, sweeperFunction, file); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
			}
			if _, err := s.store().Get(t.Context(), old.Key); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after the release: Get error = %v, want ErrNotFound (ignored, not restored)", err)
			}
			checkMetrics(t, s, sweeperFunction, nil, []string{"zombie_swept", "reconcile_scheduled"})
		},
	},

	// The reconciler, on the idempotency table's stream.
	"reconciler-unknown.json": {
		origin: &origin{"acme", "charge-6", `{"amount": 1500, "currency": "USD", "customer": "cus_42", "source": "tok_visa"}`},
		run: func(t *testing.T, s *stack, file string) {
			rec := recordImage(t, streamEvent(t, file).Records[0].Change.NewImage)
			if rec.Status != idempotency.StatusUnknown {
				t.Fatalf("%s: new image status = %s, want UNKNOWN", file, rec.Status)
			}
			// The request that became UNKNOWN had charged the provider under
			// its forwarded key.
			req, err := charges.Decode(rec.Request)
			if err != nil {
				t.Fatal(err)
			}
			c, err := s.provider.Charge(t.Context(), rec.ForwardKey(), charges.ProviderRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			if resp := s.stream(t, reconcilerFunction, file); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
			}
			got, err := s.store().Get(t.Context(), rec.Key)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != idempotency.StatusCompleted {
				t.Fatalf("record status = %s, want COMPLETED", got.Status)
			}
			want, err := charges.Response(rec, c)
			if err != nil {
				t.Fatal(err)
			}
			if want.Status != http.StatusCreated {
				t.Fatalf("ChargeResponse status = %d, want 201", want.Status)
			}
			if diff := cmp.Diff(&want, got.Response); diff != "" {
				t.Errorf("stored response mismatch (-want +got):\n%s", diff)
			}
			if n := s.charges(t, rec.ForwardKey()); n != 1 {
				t.Errorf("provider charges under the forwarded key = %d, want 1", n)
			}
			checkMetrics(t, s, reconcilerFunction, []string{`"reconcile_resolved":1`}, []string{"reconcile_failed"})
		},
	},

	// A new reservation: the sweeper schedules its recovery check, due when
	// its lease runs out (here, not for long: the message waits SQS's
	// longest delay, and the checker will send it on).
	"sweeper-new-reservation.json": {
		origin: &origin{"acme", "charge-8", `{"amount": 4200, "currency": "EUR", "customer": "cus_7", "description": "Order 1008", "source": "tok_visa"}`},
		run: func(t *testing.T, s *stack, file string) {
			if resp := s.stream(t, sweeperFunction, file); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
			}
			visible, inFlight, delayed := sqstest.Counts(t, s.sqs, s.checkQueue)
			if visible != "0" || inFlight != "0" || delayed != "1" {
				t.Errorf("check queue: %s visible, %s in flight, %s delayed; want the reservation's check, delayed", visible, inFlight, delayed)
			}
			checkMetrics(t, s, sweeperFunction, []string{`"check_scheduled":1`}, []string{"zombie_swept", "check_failed"})
		},
	},

	// The check of sweeper-new-reservation.json's reservation, due. The run
	// writes the reservation with its lease run out: the request never
	// completed.
	"checker-due-check.json": {run: func(t *testing.T, s *stack, file string) {
		reserved := recordImage(t, streamEvent(t, "sweeper-new-reservation.json").Records[0].Change.NewImage)
		reserved.ExpiresAt = time.Now().Add(-time.Second)
		if _, err := s.client.PutItem(t.Context(), &dynamodb.PutItemInput{
			TableName: aws.String(s.names.ByLogicalID["IdempotencyTable"]), Item: dynamo.ItemFromRecord(reserved),
		}); err != nil {
			t.Fatal(err)
		}
		var ev events.SQSEvent
		if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
			t.Fatal(err)
		}
		check, err := recovery.DecodeCheck(ev.Records[0].Body)
		if err != nil || check.Record != reserved.Key.ID() || check.LeaseToken != reserved.LeaseToken {
			t.Fatalf("%s: check %+v, %v; want the check of sweeper-new-reservation.json's reservation", file, check, err)
		}
		if resp := s.sqsEvent(t, checkerFunction, file); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
		}
		got, err := s.store().Get(t.Context(), reserved.Key)
		if err != nil || got.Status != idempotency.StatusUnknown || got.LeaseToken == reserved.LeaseToken {
			t.Fatalf("record = %s under %q, %v; want UNKNOWN under a new lease token", got.Status, got.LeaseToken, err)
		}
		checkMetrics(t, s, checkerFunction, []string{`"reservation_abandoned":1`, `"reconcile_scheduled":1`}, []string{"check_failed"})
		// Delivered again, as SQS may: nothing more happens.
		if resp := s.sqsEvent(t, checkerFunction, file); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("again: batch item failures = %v, want none", resp.BatchItemFailures)
		}
		if again, _ := s.store().Get(t.Context(), reserved.Key); again.LeaseToken != got.LeaseToken {
			t.Errorf("the second delivery changed the record's lease token")
		}
	}},

	// The auditor's hourly run: the segment of the event's time.
	"auditor-scheduled.json": {run: runAuditorScheduled},

	// A payment whose charge failed transiently, retried.
	"retrier-retry.json": {run: func(t *testing.T, s *stack, file string) {
		var ev events.SQSEvent
		if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
			t.Fatal(err)
		}
		var m struct{ Tenant, Payment string }
		if err := json.Unmarshal([]byte(ev.Records[0].Body), &m); err != nil {
			t.Fatal(err)
		}
		p := payments.New(m.Tenant, payments.Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Source: "tok_visa"}, time.Now())
		p.ID, p.PK = m.Payment, payments.PK(m.Tenant, m.Payment)
		item, err := attributevalue.MarshalMap(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(s.names.ByLogicalID["PaymentsTable"]), Item: item}); err != nil {
			t.Fatal(err)
		}
		if resp := s.sqsEvent(t, retrierFunction, file); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
		}
		checkSettled(t, s, p)
		checkMetrics(t, s, retrierFunction, []string{`"worker_charged":1`}, nil)
	}},

	// The reconciler resuming an abandoned order, and the receipts function
	// on the outbox table's stream (orders_test.go).
	"reconciler-unknown-order.json": {
		origin: &origin{"acme", "order-2002", `{"amount": 1800, "currency": "EUR", "customer": "cus_7", "email": "bob@example.com", "source": "tok_visa"}`},
		run:    runReconcileOrder,
	},
	"receipts-receipt-job.json":       {run: runReceiptJob},
	"receipts-batch-with-outage.json": {run: runReceiptOutage},
	// The resender, on the receipt retry queue (orders_test.go).
	"resender-retry.json":       {run: runResenderRetry},
	"resender-dead-letter.json": {run: runResenderDeadLetter},

	// The provider simulator behind its function URL (payload 2.0).
	"provider-function-url-charge.json": {run: func(t *testing.T, s *stack, file string) {
		var ev events.LambdaFunctionURLRequest
		if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
			t.Fatal(err)
		}
		key := ev.Headers["idempotency-key"]
		first := s.functionURL(t, file)
		if first.StatusCode != http.StatusCreated || first.header("Idempotent-Replayed") != "" {
			t.Fatalf("first = %d (replayed %q) %s, want 201", first.StatusCode, first.header("Idempotent-Replayed"), first.Body)
		}
		var c struct{ ID, Status string }
		if err := json.Unmarshal([]byte(first.Body), &c); err != nil || !strings.HasPrefix(c.ID, "prch_") || c.Status != "succeeded" {
			t.Errorf("charge = %+v (%v), want a succeeded prch_ charge", c, err)
		}
		again := s.functionURL(t, file)
		if again.StatusCode != http.StatusCreated || again.Body != first.Body || again.header("Idempotent-Replayed") != "true" {
			t.Errorf("again = %d (replayed %q) %s, want the replay of %s", again.StatusCode, again.header("Idempotent-Replayed"), again.Body, first.Body)
		}
		if n := s.charges(t, key); n != 1 {
			t.Errorf("charges under the key = %d, want 1", n)
		}
	}},
}

func TestEvents(t *testing.T) {
	for file, f := range fixtures {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			f.run(t, newStack(t), file)
		})
	}
}

// checkPaymentCreated checks that r is the 201 of the payment that the
// event file creates, stored pending with its idempotency record, and
// returns the payment.
func checkPaymentCreated(t *testing.T, s *stack, file string, r proxyResponse) payments.Payment {
	t.Helper()
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("%s: status = %d %s, want 201", file, r.StatusCode, r.Body)
	}
	if ct := r.header("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type = %q, want application/json", file, ct)
	}
	if h := r.header(idempotency.ReplayedHeader); h != "" {
		t.Errorf("%s: %s = %q, want none on a first request", file, idempotency.ReplayedHeader, h)
	}
	var body struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("%s: body %s: %v", file, r.Body, err)
	}
	if body.Object != "payment" || body.Status != "pending" || !payments.ValidID(body.ID) {
		t.Errorf("%s: body = %s, want a pending payment", file, r.Body)
	}
	if loc := r.header("Location"); loc != "/v1/payments/"+body.ID {
		t.Errorf("%s: Location = %q, want /v1/payments/%s", file, loc, body.ID)
	}
	req := apiRequestOf(t, file)
	want, err := payments.Decode([]byte(req.body))
	if err != nil {
		t.Fatal(err)
	}
	got := s.payment(t, req.tenant, body.ID)
	if got.Status != payments.StatusPending || got.Amount != want.Amount || got.Currency != want.Currency ||
		got.Customer != want.Customer || got.Description != want.Description || got.Source != want.Source {
		t.Errorf("%s: stored payment = %+v, want pending with the request's %+v", file, got, want)
	}
	checkRecordAnswer(t, s, idempotency.NewKey(req.tenant, req.key), r)
	return got
}

// checkRecordAnswer checks that key's idempotency record is COMPLETED with r.
func checkRecordAnswer(t *testing.T, s *stack, key idempotency.Key, r proxyResponse) {
	t.Helper()
	rec, err := s.store().Get(t.Context(), key)
	if err != nil {
		t.Fatalf("idempotency record: %v", err)
	}
	if rec.Status != idempotency.StatusCompleted || rec.Response == nil ||
		rec.Response.Status != r.StatusCode || string(rec.Response.Body) != r.Body {
		t.Errorf("idempotency record = %s %+v, want COMPLETED with the answer %d %s", rec.Status, rec.Response, r.StatusCode, r.Body)
	}
}

// checkSettled checks that the worker settled p succeeded with the charge
// the provider holds under the payment's key.
func checkSettled(t *testing.T, s *stack, p payments.Payment) {
	t.Helper()
	got := s.payment(t, p.Tenant, p.ID)
	c, err := s.provider.Lookup(t.Context(), worker.ChargeKey(p.Tenant, p.ID))
	if err != nil {
		t.Fatalf("provider lookup for %s: %v", p.ID, err)
	}
	if got.Status != payments.StatusSucceeded || got.ProviderChargeID != c.ID || c.Amount != p.Amount || c.Currency != p.Currency {
		t.Errorf("payment %s = %s with charge %q; want succeeded with the provider's charge %q of %d %s",
			p.ID, got.Status, got.ProviderChargeID, c.ID, p.Amount, p.Currency)
	}
}

// checkMetrics checks that fn's metric lines hold every string of want and
// none of absent.
func checkMetrics(t *testing.T, s *stack, fn string, want, absent []string) {
	t.Helper()
	out := s.metrics[fn].String()
	for _, m := range want {
		if !strings.Contains(out, m) {
			t.Errorf("%s metrics %q lack %s", fn, out, m)
		}
	}
	for _, m := range absent {
		if strings.Contains(out, m) {
			t.Errorf("%s metrics %q hold %s, want none", fn, out, m)
		}
	}
}

// paymentImage decodes the payment of an INSERT record's new image.
func paymentImage(t *testing.T, rec events.DynamoDBEventRecord) payments.Payment {
	t.Helper()
	var p payments.Payment
	if err := attributevalue.UnmarshalMap(stream.ToSDK(rec.Change.NewImage), &p); err != nil {
		t.Fatalf("record %s: %v", rec.EventID, err)
	}
	return p
}

// recordImage decodes an idempotency record image.
func recordImage(t *testing.T, img map[string]events.DynamoDBAttributeValue) idempotency.Record {
	t.Helper()
	rec, err := dynamo.RecordFromStreamImage(img)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// apiRequest is what an API Gateway event file asks for.
type apiRequest struct {
	tenant, key, body string
}

// apiRequestOf returns the tenant (from the authorizer context), the
// Idempotency-Key and the body of an API Gateway proxy event file of either
// payload version.
func apiRequestOf(t *testing.T, file string) apiRequest {
	t.Helper()
	var ev struct {
		Version        string            `json:"version"`
		Headers        map[string]string `json:"headers"`
		Body           string            `json:"body"`
		RequestContext struct {
			Authorizer map[string]any `json:"authorizer"`
		} `json:"requestContext"`
	}
	if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	authorizer := ev.RequestContext.Authorizer
	if ev.Version == "2.0" {
		authorizer, _ = authorizer["lambda"].(map[string]any)
	}
	tenant, _ := authorizer["tenant"].(string)
	var key string
	for k, v := range ev.Headers {
		if strings.EqualFold(k, idempotency.Header) {
			key = v
		}
	}
	return apiRequest{tenant: tenant, key: key, body: ev.Body}
}
