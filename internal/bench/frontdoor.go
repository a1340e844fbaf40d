package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/samtemplate"
)

// Groups of the devstack's measurements.
const (
	frontDoorGroup = "front door"
	stormGroup     = "duplicate storm"
)

// bareResource is the bench's route without idempotency, beside the API's.
const bareResource = "/bench/payments"

// apiKey is the bench tenant's API key in the devstack.
const apiKey = "sk_bench_" + tenant

// bareRoute is POST /v1/payments without idempotency, served by the api
// function the same way as the API (the router's log line and metrics, the
// same decoding and validation, the same payment item, the same answer):
// the payment written with one conditional PutItem, every request a new
// payment.
func bareRoute(cfg config.Config, client *dynamodb.Client, opts app.Options) http.Handler {
	opts = opts.WithDefaults(cfg)
	create := func(w http.ResponseWriter, r *http.Request) {
		req, ok := httpapi.DecodeJSON(w, r, payments.Decode)
		if !ok {
			return
		}
		tenant, _ := httpapi.Tenant(r)
		p := payments.New(tenant, req, time.Now())
		item, err := attributevalue.MarshalMap(p)
		if err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		start := time.Now()
		_, err = client.PutItem(r.Context(), &dynamodb.PutItemInput{
			TableName: aws.String(cfg.Table("PaymentsTable")), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		})
		httpapi.NoteStoreCall(r, time.Since(start))
		if err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		httpapi.WriteJSON(w, r, http.StatusCreated, p, func(h http.Header) { h.Set("Location", p.Location()) })
	}
	return httpapi.NewHandler(httpapi.Deps{
		Routes:  []httpapi.Route{{Pattern: "POST " + bareResource, Handler: http.HandlerFunc(create)}},
		Tenant:  apigw.Tenant,
		Logger:  opts.Logger,
		Metrics: opts.Emitter("api"),
	})
}

// frontDoor starts the devstack (DYNAMODB_ENDPOINT: the bench's DynamoDB
// Local) with the bench's route beside the API, and measures through its
// HTTP front door (the API Gateway emulator, the authorizer, the api
// function in Lambda execution environments): the throughput of 16
// clients, the duplicate storms, then the cold starts of the built
// functions in the same environment.
func frontDoor(ctx context.Context, opts Options, tmpl *samtemplate.Template, tables map[string]string, runID string, rep *Report) error {
	stateDir, err := os.MkdirTemp("", "once-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	vars := map[string]string{
		devstack.EnvPort:         "0",
		devstack.EnvProviderPort: "0",
		devstack.EnvSQSPort:      "0",
		devstack.EnvDevAPIKeys:   tenant + ":" + apiKey,
	}
	for id, env := range tables {
		vars[env] = runID + "-devstack-" + id
	}
	if !opts.FreshDynamoDB {
		vars[config.EnvDynamoDBEndpoint] = opts.DynamoDB
	}
	opts.progress("front door: starting the devstack (a fresh DynamoDB Local: %t)", opts.FreshDynamoDB)
	stack, err := devstack.Start(ctx, devstack.Options{
		Getenv:       func(k string) string { return vars[k] },
		TemplatePath: opts.TemplatePath,
		StateDir:     stateDir,
		Routes:       []devstack.Route{{Method: http.MethodPost, Resource: bareResource, Handler: bareRoute}},
		StreamsOff:   downstream(tmpl),
	})
	if err != nil {
		return err
	}
	defer func() {
		_ = stack.Close()
		if !opts.FreshDynamoDB {
			dropTables(stack.Config(), tables, vars)
		}
		opts.progress("front door: devstack stopped")
	}()
	cfg := stack.Config()
	dbClient, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	e := &env{cfg: cfg, client: dbClient, provider: provider.New(cfg.ProviderURL, stack.ProviderClient()), tenant: tenant}
	fd := &door{opts: opts, url: stack.URL(), env: e, runID: runID, http: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
	}}
	if opts.runs("throughput") {
		if err := fd.throughput(ctx, rep); err != nil {
			return err
		}
	}
	if opts.runs("storms") {
		if err := fd.storms(ctx, rep); err != nil {
			return err
		}
	}
	if !opts.runs("coldstarts") {
		return nil
	}
	if opts.Functions == "" {
		rep.Notes = append(rep.Notes, "Cold starts: not measured (no built functions given).")
		return nil
	}
	tableEnv := make([]string, 0, len(tables))
	for _, env := range tables {
		tableEnv = append(tableEnv, env+"="+vars[env])
	}
	return coldStarts(ctx, opts, cfg, tableEnv, stack, rep)
}

// downstream returns the functions triggered by the stream of a table
// other than the idempotency table (the worker, which charges every
// payment, the receipts function): the front door measures the API and the
// recovery that is part of it, not the work the API hands on.
func downstream(tmpl *samtemplate.Template) []string {
	var out []string
	for id, fn := range tmpl.Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "DynamoDB" {
				continue
			}
			for _, r := range samtemplate.Refs(ev.Properties["Stream"]) {
				if r.Attribute == "StreamArn" && r.Name != "IdempotencyTable" {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// dropTables deletes the devstack's tables, named in vars by their
// variables in tables.
func dropTables(cfg config.Config, tables, vars map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return
	}
	for _, env := range tables {
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(vars[env])})
	}
}

// door sends requests to the devstack's front door.
type door struct {
	opts  Options
	url   string
	env   *env
	runID string
	http  *http.Client
	seq   int
	mu    sync.Mutex
}

func (d *door) tag(what string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return fmt.Sprintf("%s-%s-%d", d.runID, what, d.seq)
}

// post sends a POST to path with key and body, as a client of the API
// does, and returns its answer.
func (d *door) post(ctx context.Context, path, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := d.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b)}, nil
}

// load is what clients measured on a route.
type load struct {
	lat     []time.Duration
	ok, bad int
	elapsed time.Duration
	keys    []string
	mu      sync.Mutex
}

// drive has the clients send requests to path for d, each its own next
// (a key and a body) after the other, and adds what they measured to l.
func (d *door) drive(ctx context.Context, path string, dur time.Duration, next func(client, i int) (key, body string), l *load) {
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for c := range d.opts.Settings.Clients {
		wg.Go(func() {
			var lat []time.Duration
			var keys []string
			ok, bad := 0, 0
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				key, body := next(c, i)
				t := time.Now()
				a, err := d.post(ctx, path, key, body)
				lat = append(lat, time.Since(t))
				if err != nil || a.status >= 300 {
					bad++
					continue
				}
				ok++
				keys = append(keys, key)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			l.lat = append(l.lat, lat...)
			l.ok += ok
			l.bad += bad
			l.keys = append(l.keys, keys...)
		})
	}
	wg.Wait()
	l.elapsed += time.Since(start)
}

// throughput measures POST /v1/payments (new keys), replays of those keys,
// and the bench's route without idempotency, in alternating rounds after a
// warm-up of each.
func (d *door) throughput(ctx context.Context, rep *Report) error {
	s := d.opts.Settings
	fresh := func(client, i int) (string, string) {
		tag := d.tag("door")
		return tag, paymentBody(tag, 1999, "")
	}
	rounds := max(1, min(s.Rounds, 3))
	per := s.Duration / time.Duration(rounds)
	var once, replays, bare, warm load
	d.opts.progress("front door: %d clients, %s per route in %d rounds", s.Clients, s.Duration, rounds)
	d.drive(ctx, "/v1/payments", 2*time.Second, fresh, &warm)
	d.drive(ctx, bareResource, 2*time.Second, fresh, &warm)
	for range rounds {
		d.drive(ctx, "/v1/payments", per, fresh, &once)
		d.drive(ctx, bareResource, per, fresh, &bare)
		keys := once.keys
		d.drive(ctx, "/v1/payments", per, func(client, i int) (string, string) {
			k := keys[(client*7919+i*s.Clients)%len(keys)]
			return k, paymentBody(k, 1999, "")
		}, &replays)
	}
	if len(once.keys) == 0 {
		return fmt.Errorf("bench: no payment was created through the front door (%d failures)", once.bad)
	}
	rowOf := func(name string, l *load) Row {
		return Row{Group: frontDoorGroup, Case: name, N: l.ok + l.bad, Figures: map[string]float64{
			FigReqPerSec: float64(l.ok) / l.elapsed.Seconds(), FigErrors: float64(l.bad),
			FigP50: ms(quantile(l.lat, 0.50)), FigP99: ms(quantile(l.lat, 0.99)),
		}}
	}
	base := rowOf("POST "+bareResource+" (no idempotency)", &bare)
	base.Baseline = true
	rows := []Row{base, rowOf("POST /v1/payments, new keys", &once), rowOf("POST /v1/payments, replays", &replays)}
	for i := range rows {
		rows[i].compare(base, FigReqPerSec, FigP50, FigP99)
	}
	rep.Rows = append(rep.Rows, rows...)
	return nil
}
