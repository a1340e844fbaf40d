package app_test

import (
	"log/slog"
	"maps"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/stream"
)

// fixture is one test's DynamoDB Local tables, with the provider simulator
// on its ProviderTable served over HTTP, and a local SQS endpoint with the
// functions' queues under their default names.
type fixture struct {
	client      *dynamodb.Client
	names       dynamotest.Names
	providerURL string
	clients     queue.Clients
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: client, Table: names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	sqsEndpoint := sqstest.Endpoint(t)
	sqsClient := sqstest.Client(t, sqsEndpoint)
	for _, q := range []string{config.DefaultCheckQueue, config.DefaultWorkerRetryQueue} {
		sqstest.Queue(t, sqsClient, q, nil)
	}
	return fixture{client: client, names: names, providerURL: srv.URL, clients: queue.Clients{DynamoDB: client, SQS: sqsClient}}
}

// config returns the functions' configuration from vars, with the test's
// tables (as template.yaml sets their variables), the simulator's URL and
// the test endpoints.
func (f fixture) config(t *testing.T, vars map[string]string) config.Config {
	t.Helper()
	env := f.names.Env()
	maps.Copy(env, vars)
	env[config.EnvProviderURL] = f.providerURL
	env[config.EnvDynamoDBEndpoint] = dynamotest.Endpoint(t)
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// poll runs h behind a Poller on table, as its event source mapping does,
// until the test ends.
func (f fixture) poll(t *testing.T, table string, h stream.Handler) {
	t.Helper()
	p, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t), DB: f.client, Table: table, Handler: h,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)
}
