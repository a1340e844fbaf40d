package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/auth"
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

// casePlain is the front door's row of new keys on the devstack whose
// idempotency table has no stream.
const casePlain = "POST /v1/payments, new keys, the idempotency table without its stream"

// caseLimit is the front door's row of the one-transaction limit
// (limitRoute), its second baseline.
const caseLimit = "POST " + limitResource + " (one transaction: record and payment, no framework, no stream)"

// caseReplays is the front door's row of once's replays.
const caseReplays = "POST /v1/payments, replays"

// caseLimitReplays is the front door's row of the limit's replays: its
// keys resent with their bodies, each a transaction cancelled on the
// record's condition that returns the stored answer.
const caseLimitReplays = "POST " + limitResource + ", replays"

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

// limitResource is the bench's one-transaction route (limitRoute), beside
// the API's.
const limitResource = "/bench/limit"

// limitTableID names the limit route's record table after the devstack's
// prefix, as its own tables are named after their logical IDs.
const limitTableID = "LimitRecords"

// limitWaits are the limit route's pauses before each transaction after
// the first: a transaction cancelled by another on the same key (a
// concurrent duplicate) is tried again after the next, then answered 409.
// As the peers harness's Go probe retries: 5 attempts, 1, 2, 5 and 10 ms
// apart.
var limitWaits = []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}

// transactWriter is the one DynamoDB call the limit route makes
// (*dynamodb.Client has it).
type transactWriter interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// limitRecord is the limit route's stored answer, keyed by the scoped
// idempotency key (tenant#sha256 of the key, as once keys its records: the
// raw key is never stored).
type limitRecord struct {
	PK string `dynamodbav:"pk"`
	// Fingerprint is once's request fingerprint
	// (idempotency.RequestFingerprint): the hex SHA-256 of the method, the
	// route and the canonical (RFC 8785) body.
	Fingerprint string `dynamodbav:"fp"`
	Status      int    `dynamodbav:"st"`
	Body        []byte `dynamodbav:"body"`
	// Expires is when the key may be used again (unix seconds).
	Expires int64 `dynamodbav:"exp"`
}

// limitRoute is the bench's one-transaction limit, served by the api
// function the same way as bareRoute (the same decoding and validation,
// the same payment item, the same answer and Location): what an
// idempotent POST costs with no framework. One TransactWriteItems writes
// the record (its answer bytes inside) to records, conditioned on the key
// being free or expired and returning the record it finds, and the payment
// conditioned on its id being new. On that cancellation the stored answer
// is replayed (status and body, Idempotent-Replayed: true, no Location:
// the record keeps only those) when the request's fingerprint (once's:
// the method, the route and the canonical body, so the same fields in
// another order are the same request) is the same, else 422
// idempotency_key_reused. A transaction cancelled only by a conflict is
// tried again after each of limitWaits, then answered 409; any other
// failure is 500. records has no stream and no TTL.
func limitRoute(records string) func(config.Config, *dynamodb.Client, app.Options) http.Handler {
	return func(cfg config.Config, client *dynamodb.Client, opts app.Options) http.Handler {
		opts = opts.WithDefaults(cfg)
		l := &limitHandler{client: client, records: records, payments: cfg.Table("PaymentsTable"), retention: cfg.Retention}
		if l.retention <= 0 {
			l.retention = config.DefaultRetention
		}
		return httpapi.NewHandler(httpapi.Deps{
			Routes:  []httpapi.Route{{Pattern: "POST " + limitResource, Handler: l}},
			Tenant:  apigw.Tenant,
			Logger:  opts.Logger,
			Metrics: opts.Emitter("api"),
		})
	}
}

// limitHandler serves limitRoute.
type limitHandler struct {
	client            transactWriter
	records, payments string
	retention         time.Duration
}

func (l *limitHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, ok := httpapi.Tenant(r)
	if !ok {
		httpapi.WriteError(w, r, idempotency.ErrNoTenant)
		return
	}
	raw, err := idempotency.ParseKey(r.Header.Values(idempotency.Header))
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	var body []byte
	req, ok := httpapi.DecodeJSON(w, r, func(b []byte) (payments.Request, error) {
		body = b
		return payments.Decode(b)
	})
	if !ok {
		return
	}
	now := time.Now()
	p := payments.New(tenant, req, now)
	answer, err := json.Marshal(p)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	fp, err := idempotency.RequestFingerprint(r.Method, limitResource, body)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	rec, err := attributevalue.MarshalMap(limitRecord{
		PK: idempotency.NewKey(tenant, raw).ID(), Fingerprint: fp,
		Status: http.StatusCreated, Body: answer, Expires: now.Add(l.retention).Unix(),
	})
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{
			TableName: aws.String(l.records), Item: rec,
			ConditionExpression:                 aws.String("attribute_not_exists(pk) OR exp < :now"),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix(), 10)}},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		{Put: &types.Put{TableName: aws.String(l.payments), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}}
	for attempt := range len(limitWaits) + 1 {
		if attempt > 0 {
			if err := sleep(r.Context(), limitWaits[attempt-1]); err != nil {
				httpapi.WriteError(w, r, fmt.Errorf("bench: limit: %w", err))
				return
			}
		}
		start := time.Now()
		_, err = l.client.TransactWriteItems(r.Context(), in)
		httpapi.NoteStoreCall(r, time.Since(start))
		if err == nil {
			w.Header().Set("Location", p.Location())
			writeAnswer(w, http.StatusCreated, answer)
			return
		}
		var cancelled *types.TransactionCanceledException
		if !errors.As(err, &cancelled) || len(cancelled.CancellationReasons) != 2 {
			httpapi.WriteError(w, r, fmt.Errorf("bench: limit: %w", err))
			return
		}
		reason := cancelled.CancellationReasons[0]
		switch {
		case aws.ToString(reason.Code) == "ConditionalCheckFailed" && reason.Item != nil:
			var old limitRecord
			if err := attributevalue.UnmarshalMap(reason.Item, &old); err != nil {
				httpapi.WriteError(w, r, fmt.Errorf("bench: limit: the stored record: %w", err))
				return
			}
			if old.Fingerprint != fp {
				httpapi.WriteError(w, r, idempotency.ErrKeyReused)
				return
			}
			w.Header().Set(idempotency.ReplayedHeader, "true")
			writeAnswer(w, old.Status, old.Body)
			return
		case !conflicted(cancelled.CancellationReasons):
			httpapi.WriteError(w, r, fmt.Errorf("bench: limit: %w", err))
			return
		}
	}
	httpapi.WriteError(w, r, &idempotency.InProgressError{RetryAfter: time.Second})
}

// sleep waits for d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// conflicted reports whether a transaction was cancelled only by another
// in flight on its items (a concurrent duplicate's).
func conflicted(reasons []types.CancellationReason) bool {
	seen := false
	for _, c := range reasons {
		switch aws.ToString(c.Code) {
		case "TransactionConflict":
			seen = true
		case "", "None":
		default:
			return false
		}
	}
	return seen
}

// writeAnswer sends a JSON answer's bytes as they are.
func writeAnswer(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// frontDoor starts the devstack (DYNAMODB_ENDPOINT: the bench's DynamoDB
// Local) with the bench's route beside the API, and measures through its
// HTTP front door (the API Gateway emulator, the authorizer, the api
// function in Lambda execution environments): the throughput of 16
// clients, the duplicate storms, then the cold starts of the built
// functions in the same environment.
func frontDoor(ctx context.Context, opts Options, tmpl *samtemplate.Template, tables map[string]string, runID string, rep *Report) error {
	stack, stop, err := startStack(ctx, opts, tables, runID+"-devstack-", "", streamReaders(tmpl, "IdempotencyTable"), true)
	if err != nil {
		return err
	}
	defer stop()
	cfg := stack.Config()
	dbClient, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	e := &env{cfg: cfg, client: dbClient, provider: provider.New(cfg.ProviderURL, stack.ProviderClient()), tenant: tenant}
	fd := &door{opts: opts, url: stack.URL(), env: e, runID: runID, dynamoPID: stack.DynamoDBLocalPID(), http: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
	}}
	if opts.runs("throughput") {
		if err := fd.throughputBeside(ctx, tmpl, tables, stack.DynamoDBEndpoint(), rep); err != nil {
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
	for id, env := range tables {
		tableEnv = append(tableEnv, env+"="+runID+"-devstack-"+id)
	}
	return coldStarts(ctx, opts, cfg, tableEnv, stack, rep)
}

// startStack starts a devstack with the bench's routes beside the API (the
// route without idempotency and, with limit, the one-transaction limit,
// whose record table it then creates), its tables named prefix+logical ID, on endpoint (empty: the bench's DynamoDB,
// or a fresh DynamoDB Local when Options.FreshDynamoDB), with the stream
// mappings of the functions in streamsOff left off (and the streams only
// they read not created). stop closes it and drops its tables unless they
// went with a DynamoDB Local of its own.
func startStack(ctx context.Context, opts Options, tables map[string]string, prefix, endpoint string, streamsOff []string, limit bool) (*devstack.Stack, func(), error) {
	stateDir, err := os.MkdirTemp("", "once-bench-")
	if err != nil {
		return nil, nil, err
	}
	vars := map[string]string{
		devstack.EnvPort:         "0",
		devstack.EnvProviderPort: "0",
		devstack.EnvSQSPort:      "0",
		// The devstack's own keys too: events/ (the authorizer's cold
		// start) use them.
		devstack.EnvDevAPIKeys: tenant + ":" + apiKey + "," + auth.DefaultDevAPIKeys,
	}
	for id, env := range tables {
		vars[env] = prefix + id
	}
	records := prefix + limitTableID
	own := endpoint == "" && opts.FreshDynamoDB
	switch {
	case endpoint != "":
		vars[config.EnvDynamoDBEndpoint] = endpoint
	case !opts.FreshDynamoDB:
		vars[config.EnvDynamoDBEndpoint] = opts.DynamoDB
	}
	routes := []devstack.Route{{Method: http.MethodPost, Resource: bareResource, Handler: bareRoute}}
	if limit {
		routes = append(routes, devstack.Route{Method: http.MethodPost, Resource: limitResource, Handler: limitRoute(records)})
	}
	opts.progress("front door: starting a devstack (%s*, a fresh DynamoDB Local: %t)", prefix, own)
	stack, err := devstack.Start(ctx, devstack.Options{
		Getenv:       func(k string) string { return vars[k] },
		TemplatePath: opts.TemplatePath,
		StateDir:     stateDir,
		Routes:       routes,
		StreamsOff:   streamsOff,
	})
	if err != nil {
		os.RemoveAll(stateDir)
		return nil, nil, err
	}
	stop := func() {
		_ = stack.Close()
		if !own {
			var names []string
			if limit {
				names = append(names, records)
			}
			for _, env := range tables {
				names = append(names, vars[env])
			}
			dropTables(stack.Config(), names...)
		}
		os.RemoveAll(stateDir)
		opts.progress("front door: devstack %s* stopped", prefix)
	}
	if !limit {
		return stack, stop, nil
	}
	if err := createLimitTable(ctx, stack.Config(), records); err != nil {
		stop()
		return nil, nil, err
	}
	return stack, stop, nil
}

// createLimitTable creates the limit route's record table: pk its string
// hash key, on demand, no stream, no TTL.
func createLimitTable(ctx context.Context, cfg config.Config, name string) error {
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench: the limit route's table: %w", err)
	}
	err = samtemplate.Create(ctx, client, []samtemplate.Table{{LogicalID: limitTableID, Input: &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}}})
	if err != nil {
		return fmt.Errorf("bench: the limit route's table: %w", err)
	}
	return nil
}

// withoutStream checks that the idempotency table of cfg has no stream:
// the front door's row without it says so.
func withoutStream(ctx context.Context, cfg config.Config) error {
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(cfg.Table("IdempotencyTable"))})
	if err != nil {
		return fmt.Errorf("bench: describe the idempotency table: %w", err)
	}
	if spec := out.Table.StreamSpecification; spec != nil && aws.ToBool(spec.StreamEnabled) {
		return fmt.Errorf("bench: the idempotency table %s has a stream: want none", aws.ToString(out.Table.TableName))
	}
	return nil
}

// streamReaders returns the functions triggered by the stream of a table
// other than keep (keep "IdempotencyTable": the worker, which charges every
// payment, the receipts function): the front door measures the API and the
// recovery that is part of it, not the work the API hands on. With keep
// empty it returns every stream-triggered function.
func streamReaders(tmpl *samtemplate.Template, keep string) []string {
	var out []string
	for id, fn := range tmpl.Functions() {
		for _, ev := range fn.Events() {
			if ev.Type != "DynamoDB" {
				continue
			}
			for _, r := range samtemplate.Refs(ev.Properties["Stream"]) {
				if r.Attribute == "StreamArn" && (keep == "" || r.Name != keep) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// dropTables deletes the tables names.
func dropTables(cfg config.Config, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return
	}
	for _, name := range names {
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	}
}

// door sends requests to the devstack's front door.
type door struct {
	opts Options
	url  string
	// plainURL is the devstack whose idempotency table has no stream
	// (throughputBeside).
	plainURL string
	// dynamoPID is DynamoDB Local's process, whose CPU time the
	// throughput reads; 0 when the bench did not start it.
	dynamoPID int
	env       *env
	runID     string
	http      *http.Client
	seq       int
	mu        sync.Mutex
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
	return d.postTo(ctx, d.url, path, key, body)
}

// postTo is post to the devstack at base.
func (d *door) postTo(ctx context.Context, base, path, key, body string) (answer, error) {
	return postJSON(ctx, d.http, base+path, key, body)
}

// load is what clients measured on a route.
type load struct {
	lat     []time.Duration
	ok, bad int
	elapsed time.Duration
	keys    []string
	// serverCPU is this process's (the devstack's) CPU time and
	// dynamoCPU DynamoDB Local's while the clients ran, when serverRead
	// and dynamoRead (every drive could read them).
	serverCPU, dynamoCPU   time.Duration
	serverRead, dynamoRead bool
	drives                 int
}

// fresh is the keys of a drive of new keys: prefixed with a tag of their
// own.
func (d *door) fresh() driveSpec { return driveSpec{Prefix: d.tag("door")} }

// drive has the clients, in a driver process of their own (runDriver),
// send requests to path of the devstack at base for dur, with keys's keys
// (its Prefix or Replay), and adds what they measured to l.
func (d *door) drive(ctx context.Context, base, path string, dur time.Duration, keys driveSpec, l *load) error {
	spec := keys
	spec.URL, spec.Duration, spec.Clients = base+path, dur, d.opts.Settings.Clients
	res, w, err := runDriver(ctx, spec, d.dynamoPID)
	if err != nil {
		return fmt.Errorf("bench: driving %s: %w", path, err)
	}
	l.lat = append(l.lat, res.Latencies...)
	l.ok += res.OK
	l.bad += res.Bad
	l.keys = append(l.keys, res.Keys...)
	l.elapsed += res.Elapsed
	l.serverRead = (l.drives == 0 || l.serverRead) && w.serverRead
	l.serverCPU += w.server
	l.dynamoRead = (l.drives == 0 || l.dynamoRead) && w.dynamoRead
	l.dynamoCPU += w.dynamo
	l.drives++
	return nil
}

// throughputBeside starts a second devstack on the same DynamoDB Local
// (endpoint), whose idempotency table has no stream (no sweeper, no
// reconciler), for the throughput's row of new keys without it: what that
// stream costs DynamoDB Local per request. It is stopped once the
// throughput is measured.
func (d *door) throughputBeside(ctx context.Context, tmpl *samtemplate.Template, tables map[string]string, endpoint string, rep *Report) error {
	plain, stop, err := startStack(ctx, d.opts, tables, d.runID+"-nostream-", endpoint, streamReaders(tmpl, ""), false)
	if err != nil {
		return fmt.Errorf("bench: the devstack without streams: %w", err)
	}
	defer stop()
	if err := withoutStream(ctx, plain.Config()); err != nil {
		return err
	}
	d.plainURL = plain.URL()
	return d.throughput(ctx, rep)
}

// throughput measures POST /v1/payments (new keys), replays of those keys,
// the bench's route without idempotency (the baseline), its
// one-transaction limit (the second baseline) and replays of the limit's
// keys, and the row without the stream, in rounds after a warm-up of each,
// each round starting at another route (roundOrder). Once's replays are
// divided by the limit's replays, every other row by the limit's new keys.
func (d *door) throughput(ctx context.Context, rep *Report) error {
	s := d.opts.Settings
	rounds := max(1, min(s.Rounds, 3))
	per := s.Duration / time.Duration(rounds)
	var once, replays, bare, limit, limitReplays, plain, warm, warmOnce, warmLimit load
	d.opts.progress("front door: %d clients, %s per route in %d rounds", s.Clients, s.Duration, rounds)
	for _, w := range []struct {
		base, path string
		l          *load
	}{
		{d.url, "/v1/payments", &warmOnce},
		{d.url, bareResource, &warm},
		{d.url, limitResource, &warmLimit},
		{d.plainURL, "/v1/payments", &warm},
	} {
		if err := d.drive(ctx, w.base, w.path, 2*time.Second, d.fresh(), w.l); err != nil {
			return err
		}
	}
	if len(warmOnce.keys) == 0 || len(warmLimit.keys) == 0 {
		return fmt.Errorf("bench: the front door's warm-up made %d payments through once, %d through the limit: want some of each to replay", len(warmOnce.keys), len(warmLimit.keys))
	}
	// replay resends the keys made on a route with their bodies: those of
	// the rounds so far, or of its warm-up before any.
	replay := func(made, warmed *load) driveSpec {
		if len(made.keys) == 0 {
			return driveSpec{Replay: warmed.keys}
		}
		return driveSpec{Replay: made.keys}
	}
	routes := []func() error{
		func() error { return d.drive(ctx, d.url, "/v1/payments", per, d.fresh(), &once) },
		func() error { return d.drive(ctx, d.url, bareResource, per, d.fresh(), &bare) },
		func() error { return d.drive(ctx, d.url, limitResource, per, d.fresh(), &limit) },
		func() error { return d.drive(ctx, d.plainURL, "/v1/payments", per, d.fresh(), &plain) },
		func() error { return d.drive(ctx, d.url, "/v1/payments", per, replay(&once, &warmOnce), &replays) },
		func() error {
			return d.drive(ctx, d.url, limitResource, per, replay(&limit, &warmLimit), &limitReplays)
		},
	}
	for round := range rounds {
		for _, i := range roundOrder(round, rounds, len(routes)) {
			if err := routes[i](); err != nil {
				return err
			}
		}
	}
	if len(once.keys) == 0 {
		return fmt.Errorf("bench: no payment was created through the front door (%d failures)", once.bad)
	}
	rowOf := func(name string, l *load) Row {
		r := Row{Group: frontDoorGroup, Case: name, N: l.ok + l.bad, Figures: map[string]float64{
			FigReqPerSec: float64(l.ok) / l.elapsed.Seconds(), FigErrors: float64(l.bad),
			FigP50: ms(quantile(l.lat, 0.50)), FigP99: ms(quantile(l.lat, 0.99)),
		}}
		if l.dynamoRead && r.N > 0 {
			r.Figures[FigDynamoCPU] = ms(l.dynamoCPU) / float64(r.N)
		}
		if l.serverRead && r.N > 0 {
			r.Figures[FigServerCPU] = ms(l.serverCPU) / float64(r.N)
		}
		return r
	}
	base := rowOf("POST "+bareResource+" (no idempotency)", &bare)
	lim := rowOf(caseLimit, &limit)
	limRe := rowOf(caseLimitReplays, &limitReplays)
	base.Baseline, lim.Baseline = true, true
	rows := []Row{
		base,
		lim,
		limRe,
		rowOf("POST /v1/payments, new keys", &once),
		rowOf(caseReplays, &replays),
		rowOf(casePlain, &plain),
	}
	for i := range rows {
		second := lim
		if rows[i].Case == caseReplays {
			second = limRe
		}
		for _, b := range []Row{base, second} {
			rows[i].compare(b, FigReqPerSec, FigP50, FigP99, FigDynamoCPU, FigServerCPU)
		}
	}
	rep.Rows = append(rep.Rows, rows...)
	return nil
}

// roundOrder is the order of n routes in round of rounds: all of them, the
// first at round*n/rounds, so that no route is always driven first (after
// the warm-up) or always after the same one.
func roundOrder(round, rounds, n int) []int {
	out := make([]int, n)
	start := round * n / max(rounds, 1)
	for i := range out {
		out[i] = (start + i) % n
	}
	return out
}
