package devstack_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// TestRoutesAndStreamsOff starts a stack with a route of its own beside the
// API's, served the same way (the gateway, the authorizer, the api
// function's adapter: the tenant comes from the authorizer), and with the
// worker's stream left unpolled.
func TestRoutesAndStreamsOff(t *testing.T) {
	env := testEnv(t)
	var logs lambdatest.Buffer
	var built config.Config
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		Output:       &logs,
		TemplatePath: dynamotest.TemplatePath(t),
		StateDir:     t.TempDir(),
		Routes: []devstack.Route{{Method: "POST", Resource: "/extra", Handler: func(cfg config.Config, _ *dynamodb.Client, _ app.Options) http.Handler {
			built = cfg
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tenant, _ := apigw.Tenant(r)
				w.WriteHeader(http.StatusAccepted)
				_, _ = w.Write([]byte(tenant))
			})
		}}},
		StreamsOff: []string{"WorkerFunction"},
	})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	if r := call(t, "POST", stack.URL()+"/extra", "", "", "{}"); r.status != http.StatusUnauthorized {
		t.Errorf("POST /extra without an API key = %d %s, want 401 from the authorizer", r.status, r.body)
	}
	if r := call(t, "POST", stack.URL()+"/extra", "sk_test_acme", "", "{}"); r.status != http.StatusAccepted || r.body != "acme" {
		t.Errorf("POST /extra = %d %q, want 202 acme", r.status, r.body)
	}
	if built.Table("PaymentsTable") != env["ONCE_PAYMENTS_TABLE"] {
		t.Errorf("the route was built with payments table %q, want %q", built.Table("PaymentsTable"), env["ONCE_PAYMENTS_TABLE"])
	}
	if r := call(t, "POST", stack.URL()+"/v1/payments", "sk_test_acme", "beside-extra", order); r.status != http.StatusCreated {
		t.Errorf("POST /v1/payments = %d %s, want 201: the API is served as before", r.status, r.body)
	}
	if r := call(t, "GET", stack.URL()+"/extra", "sk_test_acme", "", ""); r.status == http.StatusAccepted {
		t.Errorf("GET /extra = %d, want the route's method only", r.status)
	}
	polled := map[string]bool{}
	off := map[string]bool{}
	for _, l := range logs.Lines(t) {
		fn, _ := l["function"].(string)
		switch l["msg"] {
		case "devstack: stream mapping":
			polled[fn] = true
		case "devstack: stream mapping off":
			off[fn] = true
		}
	}
	if polled["WorkerFunction"] || !off["WorkerFunction"] {
		t.Errorf("worker stream polled: %v, left off: %v; want it off", polled["WorkerFunction"], off["WorkerFunction"])
	}
	if !polled["SweeperFunction"] || !polled["ReconcilerFunction"] {
		t.Errorf("stream mappings started: %v, want the sweeper's and the reconciler's", polled)
	}
	// A stream no mapping reads is not created: DynamoDB Local would pay
	// for its records on every write.
	for _, c := range []struct {
		table      string
		wantStream bool
	}{
		{env["ONCE_PAYMENTS_TABLE"], false},
		{env["ONCE_IDEMPOTENCY_TABLE"], true},
		{env["ONCE_OUTBOX_TABLE"], true},
	} {
		if got := aws.ToString(streamARN(t, c.table)) != ""; got != c.wantStream {
			t.Errorf("table %s has a stream: %v, want %v", c.table, got, c.wantStream)
		}
	}
}
