package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/worker"
)

// providerTimeout bounds a charge in the tests: short, so that tok_timeout
// ends quickly, and still far above a simulator charge on DynamoDB Local.
const providerTimeout = time.Second

// env is one test's tables, provider simulator and worker.
type env struct {
	db       *dynamodb.Client
	streams  *dynamodbstreams.Client
	names    dynamotest.Names
	sim      *simulator.Server
	provider *provider.Client
	table    *payments.Table
	worker   *worker.Worker
	// requests counts the HTTP requests that reached the simulator.
	requests atomic.Int64
	// chargesDown, while set, answers every charge request 503 (nothing
	// charged) in the simulator's place: a provider outage whatever the
	// source token. lookupsDown does the same to the look-ups of charges.
	chargesDown, lookupsDown atomic.Bool
	logs                     lambdatest.Buffer
	metrics                  lambdatest.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := dynamotest.Client(t)
	e := &env{db: db, streams: dynamotest.Streams(t), names: dynamotest.Tables(t, db)}
	e.sim = simulator.New(simulator.Options{DB: db, Table: e.names.ByLogicalID["ProviderTable"], HoldFor: 10 * time.Second})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		if r.URL.Path == "/v1/charges" && (r.Method == http.MethodPost && e.chargesDown.Load() || r.Method == http.MethodGet && e.lookupsDown.Load()) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error": {"type": "api_error", "code": "unavailable", "message": "down"}}`)
			return
		}
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e.provider = provider.New(srv.URL, &http.Client{Timeout: providerTimeout})
	e.table = payments.NewTable(db, e.names.ByLogicalID["PaymentsTable"])
	w, err := worker.New(worker.Config{
		Charger: e.provider,
		Settler: e.table,
		Logger:  slog.New(slog.NewJSONHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: metrics.New(&e.metrics, "once", map[string]string{"Service": "worker"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.worker = w
	return e
}

// pay writes a new pending payment of source, as the API does.
func (e *env) pay(t *testing.T, source string) payments.Payment {
	t.Helper()
	p := payments.New("acme", payments.Request{
		Amount: 2500, Currency: "eur", Customer: "cus_42", Description: "order 7",
		Metadata: map[string]string{"order": "7"}, Source: source,
	}, time.Now())
	e.put(t, e.names.ByLogicalID["PaymentsTable"], p)
	return p
}

// put writes v (a struct or an item) to table.
func (e *env) put(t *testing.T, table string, v any) {
	t.Helper()
	item, ok := v.(map[string]types.AttributeValue)
	if !ok {
		var err error
		if item, err = attributevalue.MarshalMap(v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
}

// poison writes a pending payment whose amount is a string: the template's
// filter lets it through, and it does not decode.
func (e *env) poison(t *testing.T) string {
	t.Helper()
	pk := "acme#" + payments.NewID()
	e.put(t, e.names.ByLogicalID["PaymentsTable"], map[string]types.AttributeValue{
		"pk":     &types.AttributeValueMemberS{Value: pk},
		"status": &types.AttributeValueMemberS{Value: "pending"},
		"amount": &types.AttributeValueMemberS{Value: "a lot"},
	})
	return pk
}

// get returns p as stored now.
func (e *env) get(t *testing.T, p payments.Payment) payments.Payment {
	t.Helper()
	got, err := e.table.Get(t.Context(), p.Tenant, p.ID)
	if err != nil {
		t.Fatalf("Get(%s): %v", p.ID, err)
	}
	return got
}

// charges returns the simulator's count of charges made under p's key.
func (e *env) charges(t *testing.T, p payments.Payment) int {
	t.Helper()
	n, err := e.sim.Count(t.Context(), worker.ChargeKey(p.Tenant, p.ID))
	if err != nil {
		t.Fatalf("Count(%s): %v", p.ID, err)
	}
	return n
}

// pollerOptions returns fast options for a Poller of table.
func (e *env) pollerOptions(t *testing.T, table string, h stream.Handler) stream.PollerOptions {
	return stream.PollerOptions{
		Client:       e.streams,
		DB:           e.db,
		Table:        table,
		Name:         "worker",
		Handler:      h,
		PollInterval: 20 * time.Millisecond,
		RetryBackoff: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	}
}

// run runs a Poller with opts until stop is called or the test ends.
func run(t *testing.T, opts stream.PollerOptions) (stop func()) {
	t.Helper()
	p, err := stream.NewPoller(opts)
	if err != nil {
		t.Fatal(err)
	}
	return lambdatest.Start(t, p)
}

// records reads table's stream from its start until it has n records, as
// Lambda would deliver them, without handling them.
func (e *env) records(t *testing.T, table string, n int) []events.DynamoDBEventRecord {
	t.Helper()
	var (
		mu   sync.Mutex
		recs []events.DynamoDBEventRecord
	)
	stop := run(t, e.pollerOptions(t, table, func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, ev.Records...)
		return events.DynamoDBEventResponse{}, nil
	}))
	lambdatest.WaitFor(t, 10*time.Second, "stream records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(recs) >= n
	})
	stop()
	if len(recs) != n {
		t.Fatalf("read %d stream records, want %d", len(recs), n)
	}
	return recs
}

func pkOf(rec events.DynamoDBEventRecord) string {
	if v, ok := rec.Change.Keys["pk"]; ok {
		return v.String()
	}
	return ""
}

// counts sums the EMF metrics written to e.metrics, checking each document's
// namespace and dimensions.
func (e *env) counts(t *testing.T) map[string]int {
	t.Helper()
	return lambdatest.Counts(t, e.metrics.String(), "worker")
}

// countsSince returns the EMF metrics counted since e.counts returned
// before, without those counted none.
func (e *env) countsSince(t *testing.T, before map[string]int) map[string]int {
	t.Helper()
	counts := e.counts(t)
	for k, n := range before {
		if counts[k] -= n; counts[k] == 0 {
			delete(counts, k)
		}
	}
	return counts
}

// recordLogs returns the "worker: record" log lines about payment id.
func (e *env) recordLogs(t *testing.T, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: record" && l["payment"] == id {
			out = append(out, l)
		}
	}
	return out
}

// outcomes returns the outcomes logged for payment id, with their levels.
func (e *env) outcomes(t *testing.T, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range e.recordLogs(t, id) {
		out[l["level"].(string)+" "+l["outcome"].(string)]++
	}
	return out
}
