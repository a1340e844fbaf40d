package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/httpapi"
)

// fakeTransact is a transactWriter whose every call is answered by the
// next of answers (the last one again once they run out), given the
// call's input; it counts the calls.
type fakeTransact struct {
	answers []func(*dynamodb.TransactWriteItemsInput) error
	mu      sync.Mutex
	calls   int
}

func (f *fakeTransact) TransactWriteItems(_ context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := f.answers[min(f.calls, len(f.answers)-1)]
	f.calls++
	if err := answer(in); err != nil {
		return nil, err
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// cancelled is a TransactionCanceledException with one reason per code
// (the record's, then the payment's), the record's carrying item.
func cancelled(item map[string]types.AttributeValue, codes ...string) error {
	e := &types.TransactionCanceledException{Message: aws.String("Transaction cancelled")}
	for i, c := range codes {
		r := types.CancellationReason{Code: aws.String(c)}
		if i == 0 {
			r.Item = item
		}
		e.CancellationReasons = append(e.CancellationReasons, r)
	}
	return e
}

// storedBody is the answer the fake's stored record holds.
const storedBody = `{"id":"pay_stored"}`

var (
	conflict = func(*dynamodb.TransactWriteItemsInput) error {
		return cancelled(nil, "TransactionConflict", "None")
	}
	// stored fails the record's condition and returns the record the
	// request would write, with storedBody for its answer: the same
	// fingerprint, another body.
	stored = func(in *dynamodb.TransactWriteItemsInput) error {
		item := map[string]types.AttributeValue{}
		for k, v := range in.TransactItems[0].Put.Item {
			item[k] = v
		}
		item["body"] = &types.AttributeValueMemberB{Value: []byte(storedBody)}
		return cancelled(item, "ConditionalCheckFailed", "None")
	}
	written = func(*dynamodb.TransactWriteItemsInput) error { return nil }
)

// TestLimitRetry holds the limit route's retry to what the peers
// harness's probe does, with a fake DynamoDB (DynamoDB Local serializes
// transactions, so it never cancels one for a conflict): a transaction
// cancelled by a conflict is tried again, 5 times in all, then answered
// 409 with Retry-After; a conflict then the stored record replays it; any
// other cancellation is 500 at once; a client gone while the route waits
// ends the retries.
func TestLimitRetry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []func(*dynamodb.TransactWriteItemsInput) error
		cancel    bool
		calls     int
		status    int
		code      string
		replayed  bool
		body      string
		retryWait bool
	}{
		{name: "always a conflict", answers: []func(*dynamodb.TransactWriteItemsInput) error{conflict}, calls: 5, status: http.StatusConflict, code: "idempotency_request_in_progress", retryWait: true},
		{name: "a conflict, then the stored record", answers: []func(*dynamodb.TransactWriteItemsInput) error{conflict, stored}, calls: 2, status: http.StatusCreated, replayed: true, body: storedBody},
		{name: "a conflict, then written", answers: []func(*dynamodb.TransactWriteItemsInput) error{conflict, written}, calls: 2, status: http.StatusCreated},
		{name: "four conflicts, then written", answers: []func(*dynamodb.TransactWriteItemsInput) error{conflict, conflict, conflict, conflict, written}, calls: 5, status: http.StatusCreated},
		{name: "throttled", answers: []func(*dynamodb.TransactWriteItemsInput) error{func(*dynamodb.TransactWriteItemsInput) error {
			return cancelled(nil, "None", "ThrottlingError")
		}}, calls: 1, status: http.StatusInternalServerError, code: "internal_error"},
		{name: "a conflict and a failed condition on the payment", answers: []func(*dynamodb.TransactWriteItemsInput) error{func(*dynamodb.TransactWriteItemsInput) error {
			return cancelled(nil, "TransactionConflict", "ConditionalCheckFailed")
		}}, calls: 1, status: http.StatusInternalServerError, code: "internal_error"},
		{name: "not a cancellation", answers: []func(*dynamodb.TransactWriteItemsInput) error{func(*dynamodb.TransactWriteItemsInput) error {
			return errors.New("connection reset")
		}}, calls: 1, status: http.StatusInternalServerError, code: "internal_error"},
		{name: "the client gone while waiting", answers: []func(*dynamodb.TransactWriteItemsInput) error{conflict}, cancel: true, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeTransact{answers: tc.answers}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				fake.answers = []func(*dynamodb.TransactWriteItemsInput) error{func(in *dynamodb.TransactWriteItemsInput) error {
					cancel()
					return conflict(in)
				}}
			}
			h := httpapi.NewHandler(httpapi.Deps{
				Routes: []httpapi.Route{{Pattern: "POST " + limitResource, Handler: &limitHandler{
					client: fake, records: "records", payments: "payments", retention: 24 * time.Hour,
				}}},
				Tenant: func(*http.Request) (string, bool) { return tenant, true },
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			})
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, limitResource, strings.NewReader(paymentBody("customer", 1999, "")))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idempotency.Header, "key-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)

			if fake.calls != tc.calls {
				t.Errorf("TransactWriteItems calls = %d, want %d", fake.calls, tc.calls)
			}
			if tc.cancel {
				return
			}
			if w.Code != tc.status {
				t.Errorf("status = %d (%s), want %d", w.Code, w.Body, tc.status)
			}
			if got := w.Header().Get(idempotency.ReplayedHeader) == "true"; got != tc.replayed {
				t.Errorf("replayed = %t, want %t", got, tc.replayed)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tc.retryWait {
				t.Errorf("Retry-After %q, want one: %t", w.Header().Get("Retry-After"), tc.retryWait)
			}
			if tc.code != "" {
				var prob struct {
					Code string `json:"code"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &prob); err != nil || prob.Code != tc.code {
					t.Errorf("answer %s: code %q (%v), want %q", w.Body, prob.Code, err, tc.code)
				}
			}
			if tc.body != "" && w.Body.String() != tc.body {
				t.Errorf("body = %s, want %s", w.Body, tc.body)
			}
		})
	}
}

// TestConflicted: a cancellation is a conflict to retry only when some
// reason is TransactionConflict and every other is none.
func TestConflicted(t *testing.T) {
	for _, tc := range []struct {
		codes []string
		want  bool
	}{
		{[]string{"TransactionConflict", "None"}, true},
		{[]string{"None", "TransactionConflict"}, true},
		{[]string{"TransactionConflict", "TransactionConflict"}, true},
		{[]string{"TransactionConflict", ""}, true},
		{[]string{"None", "None"}, false},
		{[]string{"ConditionalCheckFailed", "None"}, false},
		{[]string{"TransactionConflict", "ConditionalCheckFailed"}, false},
		{[]string{"TransactionConflict", "ThrottlingError"}, false},
		{[]string{"ValidationError", "TransactionConflict"}, false},
		{nil, false},
	} {
		var reasons []types.CancellationReason
		for _, c := range tc.codes {
			reasons = append(reasons, types.CancellationReason{Code: aws.String(c)})
		}
		if got := conflicted(reasons); got != tc.want {
			t.Errorf("conflicted(%q) = %t, want %t", tc.codes, got, tc.want)
		}
	}
}

// TestRoundOrder: every round drives every route once, and each round
// starts at another route, spread over the routes.
func TestRoundOrder(t *testing.T) {
	for _, tc := range []struct {
		rounds, n int
		want      [][]int
	}{
		{1, 6, [][]int{{0, 1, 2, 3, 4, 5}}},
		{2, 6, [][]int{{0, 1, 2, 3, 4, 5}, {3, 4, 5, 0, 1, 2}}},
		{3, 6, [][]int{{0, 1, 2, 3, 4, 5}, {2, 3, 4, 5, 0, 1}, {4, 5, 0, 1, 2, 3}}},
		{3, 2, [][]int{{0, 1}, {0, 1}, {1, 0}}},
	} {
		var got [][]int
		for round := range tc.rounds {
			got = append(got, roundOrder(round, tc.rounds, tc.n))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("roundOrder over %d rounds of %d routes (-want +got):\n%s", tc.rounds, tc.n, diff)
		}
	}
}

// TestStackWithoutLimit: a devstack started without the limit has neither
// its table nor its route.
func TestStackWithoutLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a devstack against DynamoDB Local")
	}
	stack, prefix := testStack(t, false)
	_, err := dynamotest.Client(t).DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(prefix + limitTableID)})
	if notFound := (*types.ResourceNotFoundException)(nil); !errors.As(err, &notFound) {
		t.Errorf("DescribeTable(the limit's table) = %v, want ResourceNotFoundException", err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, stack.URL()+limitResource, strings.NewReader(paymentBody("customer", 1999, "")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.Header, prefix+"key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusCreated {
		t.Errorf("POST %s = %d, want no such route", limitResource, resp.StatusCode)
	}
}
