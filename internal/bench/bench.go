package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/samtemplate"
)

// Options configures Run. DynamoDB and TemplatePath are required.
type Options struct {
	// DynamoDB is the DynamoDB endpoint (DynamoDB Local).
	DynamoDB string
	// FreshDynamoDB has the devstack start a DynamoDB Local of its own
	// (from .cache/dynamodb-local) for the front door: DynamoDB Local
	// slows down as it is used, several times over after the handler
	// part.
	FreshDynamoDB bool
	// TemplatePath is the repository's template.yaml: the tables, the
	// API's routes, the functions.
	TemplatePath string
	// Functions is a directory of built functions, <name>/bootstrap, for
	// the cold starts; none are measured when it is empty.
	Functions string
	// Settings are the sizes of the run.
	Settings Settings
	// Provider starts the provider simulator in a process of its own (see
	// ServeProvider) and returns its base URL and how to stop it.
	Provider func(ctx context.Context, env []string) (url string, stop func(), err error)
	// Log receives progress lines (nil: none).
	Log io.Writer
	// Only, when not empty, names the parts to run, of Parts.
	Only []string
}

// Parts are the parts of a run, in order: the endpoints at the handler,
// the stored sizes, the front door's throughput, the duplicate storms and
// the cold starts.
var Parts = []string{"handlers", "stored", "throughput", "storms", "coldstarts"}

// runs reports whether part is to run.
func (o Options) runs(part string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, part)
}

// Settings are the sizes of a run (DefaultSettings, scaled by Scale).
type Settings struct {
	// Samples is the number of operations measured per case of an
	// endpoint, over Rounds rounds.
	Samples int `json:"samples"`
	Rounds  int `json:"rounds"`
	// Clients send requests to the front door for Duration per route, in
	// Rounds alternating rounds.
	Clients  int           `json:"clients"`
	Duration time.Duration `json:"duration_ns"`
	// StormKeys keys are each sent StormDuplicates times at once, in
	// waves of StormWave keys.
	StormKeys       int `json:"storm_keys"`
	StormDuplicates int `json:"storm_duplicates"`
	StormWave       int `json:"storm_wave"`
	// ColdStarts is the number of starts of each function.
	ColdStarts int `json:"cold_starts"`
}

// DefaultSettings are the sizes of `make bench`: a few minutes on two
// cores.
var DefaultSettings = Settings{
	Samples: 200, Rounds: 10, Clients: 16, Duration: 6 * time.Second,
	StormKeys: 200, StormDuplicates: 8, StormWave: 10, ColdStarts: 3,
}

// Scale returns s with its samples, durations and cold starts multiplied by
// f (BENCH_SCALE), the storm and the clients unchanged.
func (s Settings) Scale(f float64) Settings {
	s.Samples = max(s.Rounds, int(float64(s.Samples)*f))
	s.Duration = time.Duration(float64(s.Duration) * f)
	s.ColdStarts = max(1, int(float64(s.ColdStarts)*f))
	return s
}

func (o Options) progress(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "bench: "+format+"\n", args...)
	}
}

// tenant is the tenant every request of the bench is made for.
const tenant = "acme"

// Run measures everything and returns the report: the handler group of
// every endpoint, the front door, the storms, the stored sizes and the
// cold starts.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.DynamoDB == "" || opts.TemplatePath == "" || opts.Provider == nil {
		return nil, errors.New("bench: Options.DynamoDB, TemplatePath and Provider are required")
	}
	s := opts.Settings
	if s.Samples <= 0 || s.Rounds <= 0 || s.Clients <= 0 || s.Duration <= 0 || s.StormKeys <= 0 || s.StormDuplicates <= 0 || s.StormWave <= 0 || s.ColdStarts <= 0 {
		return nil, fmt.Errorf("bench: settings %+v: every size must be positive", s)
	}
	rep := &Report{Started: time.Now(), Settings: s, Host: host(opts.DynamoDB)}
	var b [3]byte
	_, _ = rand.Read(b[:])
	runID := "bench" + hex.EncodeToString(b[:])

	tmpl, err := samtemplate.Load(opts.TemplatePath)
	if err != nil {
		return nil, err
	}
	vars := tableVars(tmpl)
	client, err := app.DynamoDB(ctx, config.Config{DynamoDBEndpoint: opts.DynamoDB, Region: dynamoclient.LocalRegion})
	if err != nil {
		return nil, err
	}
	names, drop, err := createTables(ctx, client, tmpl, runID)
	if err != nil {
		return nil, err
	}
	dropped := false
	defer func() {
		if !dropped {
			drop()
		}
	}()

	// The provider simulator, in a process of its own.
	provEnv := []string{
		config.EnvDynamoDBEndpoint + "=" + opts.DynamoDB,
		vars["ProviderTable"] + "=" + names["ProviderTable"],
		config.EnvLogLevel + "=warn",
	}
	providerURL, stopProvider, err := opts.Provider(ctx, provEnv)
	if err != nil {
		return nil, fmt.Errorf("bench: start the provider simulator: %w", err)
	}
	defer stopProvider()

	getenv := map[string]string{config.EnvDynamoDBEndpoint: opts.DynamoDB, config.EnvProviderURL: providerURL}
	for id, v := range vars {
		getenv[v] = names[id]
	}
	cfg, err := config.FromEnv(func(k string) string { return getenv[k] })
	if err != nil {
		return nil, err
	}
	meter := &Meter{}
	h := &handlers{
		opts:    opts,
		env:     &env{cfg: cfg, client: client, provider: provider.New(providerURL, nil), tenant: tenant},
		meter:   meter,
		counted: meter.Wrap(client),
		clock:   &clock{},
		runID:   runID,
	}
	if opts.runs("handlers") {
		opts.progress("handlers: %d samples per case in %d rounds", s.Samples, s.Rounds)
		if err := h.run(ctx, rep); err != nil {
			return nil, fmt.Errorf("bench: handlers: %w", err)
		}
	}
	if opts.runs("stored") {
		opts.progress("stored answers")
		if err := storedSizes(ctx, h, rep); err != nil {
			return nil, fmt.Errorf("bench: stored sizes: %w", err)
		}
	}
	// DynamoDB Local slows down as the tables' streams fill up.
	drop()
	dropped = true
	if opts.runs("throughput") || opts.runs("storms") || opts.runs("coldstarts") {
		if err := frontDoor(ctx, opts, tmpl, vars, runID, rep); err != nil {
			return nil, fmt.Errorf("bench: front door: %w", err)
		}
	}
	rep.Took = time.Since(rep.Started)
	rep.Host.LoadAfter = loadAverage()
	rep.Notes = append(notes, rep.Notes...)
	return rep, nil
}

// tableVars returns the environment variable that names each table of
// the template (by logical ID) to the functions: config.TableEnv's rule,
// ONCE_PAYMENTS_TABLE for PaymentsTable.
func tableVars(tmpl *samtemplate.Template) map[string]string {
	out := map[string]string{}
	for id := range tmpl.ResourcesOfType("AWS::DynamoDB::Table") {
		out[id] = config.TableEnv(id)
	}
	return out
}

// createTables creates the template's tables for the stack runID, and
// returns their names by logical ID and a function that drops them.
func createTables(ctx context.Context, client *dynamodb.Client, tmpl *samtemplate.Template, runID string) (map[string]string, func(), error) {
	tables, err := tmpl.Tables(runID)
	if err != nil {
		return nil, nil, err
	}
	if err := samtemplate.Create(ctx, client, tables); err != nil {
		return nil, nil, err
	}
	names := map[string]string{}
	for _, t := range tables {
		names[t.LogicalID] = aws.ToString(t.Input.TableName)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, name := range names {
			_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		}
	}
	return names, drop, nil
}

func host(dynamoDB string) Host {
	h := Host{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		LoadBefore: loadAverage(), DynamoDB: dynamoDB}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

// loadAverage is the 1-minute load average (Linux; 0 elsewhere).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// notes explain the table.
var notes = []string{
	"Endpoint groups: the api function's Lambda handler (API Gateway proxy event in, proxy response out), built as functions/api builds it, " +
		"on DynamoDB Local tables of template.yaml; the provider simulator runs in a process of its own. " +
		"Each figure is per operation; baselines and cases run in alternating rounds. " +
		"*bare put*: one conditional PutItem of the endpoint's business item (a charge, which has none, as an item); " +
		"*bare transaction*: one TransactWriteItems of that item and of a copy of the stored idempotency record (the floor of a one-round-trip design). " +
		"× baseline: each figure (calls, WCU, p50, p99, allocs) divided by the bare put's, then by the bare transaction's. " +
		"\"other instance\": a function instance that has not seen the key (its replay cache is empty). " +
		"Concurrent duplicates: each sent at once to an instance of its own, as Lambda runs them. " +
		"payments has no \"in progress\" row: its reservation, payment and answer are one transaction, so no duplicate can find it in progress. " +
		"\"crash X, recovered\": after a crash at X, what it takes to reach the final answer: for a reservation left in progress, the checker's check once the lease " +
		"has run out and the reconciler's resolution, then the client's retry to a new instance; the calls, units, latency and allocations are those of all three. " +
		"\"lease check\": the check every External reservation arms, handled by the checker after the lease, once the request has completed.",
	"RCU/WCU: reads and single-item writes as DynamoDB Local reports them (ReturnConsumedCapacity TOTAL, set by an SDK middleware on the measured clients; " +
		"the code under measurement is unchanged). DynamoDB Local's units for a transaction are not AWS's (4 for a one-item transaction of 100 bytes, where AWS documents 2), " +
		"and a failed call reports none, on AWS as on DynamoDB Local, though a failed conditional write consumes the units of the larger of its item and the existing one " +
		"and a cancelled transaction those of all of its items, twice: those units are computed from the item sizes as the DynamoDB Developer Guide documents them " +
		"(wcu_computed in the JSON); an item a transaction updates is sized as it stands after the call.",
	"allocs/op: heap allocations of the whole process while the operation ran (runtime.MemStats.Mallocs), the Meter's middleware included (a few per DynamoDB call).",
	"Front door: the devstack (the API Gateway emulator, the REQUEST authorizer, its answer cached, and the api function in Lambda execution environments " +
		"through the Lambda runtime's JSON path) on a DynamoDB Local of its own, with the streams of the functions downstream of the API (worker, receipts) not polled, and so not created (devstack.Options.StreamsOff); " +
		"16 clients over keep-alive HTTP, in a process of their own (the bench's command run again as a driver), after a warm-up, in rounds of every route, each round starting at another route; the replays resend keys created before (in the rounds so far, else in the warm-up) with their bodies, to whichever environment is free. " +
		"The bench's route without idempotency decodes and validates the body as POST /v1/payments does, writes the same payment item with one conditional PutItem and answers the same JSON. " +
		"The one-transaction limit (POST /bench/limit), served the same way, writes that payment and a record of the answer (the scoped key, once's request fingerprint: the SHA-256 of the method, the route and the canonical body; the status, the answer's bytes, an expiry) " +
		"in one TransactWriteItems to a table of its own without a stream, the record conditioned on the key being free or expired (ALL_OLD returned on failure), the payment on its id being new; " +
		"a cancelled transaction replays the stored status and body when the fingerprint is the same, else 422; a transaction cancelled by a conflict is tried again, 5 times 1, 2, 5 and 10 ms apart, then 409, as the peers harness's Go probe does: the limit of a design with no framework. " +
		"The limit's replays (POST /bench/limit, replays) resend the limit's keys with their bodies, in the same rounds: each a transaction cancelled on the record's condition that returns the stored answer. " +
		"× baseline: each figure divided by the route without idempotency's, then by the limit's new keys; once's replays by the route without idempotency's, then by the limit's replays. " +
		"The row \"the idempotency table without its stream\" is a second devstack on the same DynamoDB Local whose tables have no stream (no sweeper, no reconciler: no recovery), " +
		"driven in the same rounds: what the stream that recovery reads costs DynamoDB Local, which writes each stream record as part of the write (AWS does not add it to the request). " +
		"DynamoDB Local CPU: the emulator process's user and system time (/proc, 10 ms ticks) while the clients ran, per request; it includes the stream pollers' reads, " +
		"and the first devstack's pollers read its stream during every row, the one without the stream and the limit's too: the difference between the two rows of new keys is a lower bound of the stream's cost, " +
		"and the limit's CPU per request is overstated by the pollers' share (its own writes have no stream), so a ratio of once's DynamoDB Local CPU to the limit's is understated. " +
		"Only when the bench started DynamoDB Local (not with DYNAMODB_ENDPOINT), on Linux. " +
		"Server CPU: the bench process's own user and system time (getrusage RUSAGE_SELF: its children, the clients' driver among them, excluded) from the clients' start to their end, per request: " +
		"the devstacks' API Gateway emulator, authorizer, Lambda runtime path and api function, and whatever else runs in it meanwhile, the first devstack's stream pollers included, during every row " +
		"(the clients' own CPU, and the latencies, are the driver's; the provider simulator runs in a process of its own).",
	"Duplicate storm: waves of 10 keys, each sent 8 times at once (80 requests in flight), then one follow-up per key; effects are counted where they land " +
		"(payment items, the provider's charges and refunds) and include the follow-up's, so the route without idempotency makes 9 per key; " +
		"a key's answers differ when two of its final answers (2xx, 4xx but 409) are not the same bytes.",
	"Cold start: each function's bootstrap, built as `make build` builds it but for this machine's architecture, started alone under a minimal Lambda Runtime API " +
		"with only its configuration in its environment, against the devstack: the time from exec to its first answer (init: to its first poll for an event); " +
		"with a few starts, p99 is the slowest. Each first answer must be the function's success, or the run fails: a 2xx proxy response (api, provider), " +
		"an Allow (authorizer), no batch item failure (the stream and queue functions); the receipts job its event is of is put in the outbox before each start.",
}
