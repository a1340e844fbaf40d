package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/checker"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/lambdaenv"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/reconciler"
)

// The cases of the handler group, in the table's order.
const (
	caseBarePut      = "bare put"
	caseBareTxn      = "bare transaction"
	caseFirst        = "first"
	caseReplayWarm   = "replay, warm instance"
	caseReplayCold   = "replay, other instance"
	caseMismatchWarm = "mismatch, warm instance"
	caseMismatchCold = "mismatch, other instance"
	caseConcurrent   = "concurrent duplicates"
	caseInProgress   = "in progress"
	caseCheck        = "lease check of a reservation"
)

// caseCrash names the recovery from a crash at point.
func caseCrash(point string) string { return "crash " + point + ", recovered" }

// duplicates is how many requests with one key a concurrent case sends at
// once, each to its own instance of the function, as Lambda would run them.
const duplicates = 8

// handlers measures each endpoint's outcomes at the api function's Lambda
// handler (the API Gateway proxy event in, the proxy response out), built
// as functions/api builds it, on tables of its own without stream pollers,
// with the provider simulator in a process of its own (its allocations are
// not the function's). The instances under measurement, the checker and
// the reconciler reach DynamoDB through the Meter; the setup (crashes,
// payments to refund) does not.
type handlers struct {
	opts    Options
	env     *env
	meter   *Meter
	counted *dynamodb.Client
	clock   *clock
	seq     int
	runID   string
	// runs are the endpoints' states, once run has run.
	runs []*endpointRun
}

// endpointRun is one endpoint's state in the handler group.
type endpointRun struct {
	h *handlers
	e *endpoint
	// warm is the instance every first request goes to, so that it has
	// seen each answer (its replay cache).
	warm invoke
	// crash has crash injection on and is not counted.
	crash invoke
	// check and reconcile are the checker and reconciler functions'
	// handlers, counted.
	check     queue.Handler
	reconcile stream.Handler
	// The baselines' items: a copy of a stored record item and of the
	// business item a first request wrote.
	record, business map[string]types.AttributeValue
	businessTable    string
	results          map[string]*measured
}

// instance returns a new instance of the api function (an empty replay
// cache) on client, with crash injection on when faults is.
func (h *handlers) instance(client *dynamodb.Client, faults bool) (invoke, error) {
	cfg := h.env.cfg
	cfg.FaultInjection = faults
	api, err := apifn.Handler(cfg, client, app.Options{
		Logger:  app.Logger(io.Discard, cfg.LogLevel),
		Metrics: io.Discard,
		Now:     h.clock.Now,
	})
	if err != nil {
		return nil, err
	}
	// Run as the Lambda runtime runs it: a crash is a function error. Every
	// environment serves this one instance (one replay cache).
	fn := lambdaenv.New("api", func() (any, error) { return apigw.NewLambda(api), nil })
	return func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
		return fn.Invoke(ctx, payload)
	}, nil
}

// tag returns a new unique tag (a key, a customer).
func (h *handlers) tag(what string) string {
	h.seq++
	return fmt.Sprintf("%s-%s-%d", h.runID, what, h.seq)
}

func (h *handlers) newRun(ctx context.Context, e *endpoint) (*endpointRun, error) {
	r := &endpointRun{h: h, e: e, results: map[string]*measured{}}
	var err error
	if r.warm, err = h.instance(h.counted, false); err != nil {
		return nil, err
	}
	if r.crash, err = h.instance(h.env.client, true); err != nil {
		return nil, err
	}
	if e.external {
		cfg := h.env.cfg
		// Every check the bench hands the checker is due: it never sends
		// one on, so its queue is never reached.
		cfg.CheckQueue = "http://127.0.0.1:1/000000000000/bench-check"
		cfg.SQSEndpoint = "http://127.0.0.1:1"
		sqsClient, err := queue.Client(ctx, cfg, queue.ClientOptions{})
		if err != nil {
			return nil, err
		}
		opts := app.Options{Logger: app.Logger(io.Discard, cfg.LogLevel), Metrics: io.Discard, Now: h.clock.Now}
		if r.check, err = checker.Handler(ctx, cfg, queue.Clients{DynamoDB: h.counted, SQS: sqsClient}, opts); err != nil {
			return nil, err
		}
		if r.reconcile, err = reconciler.Handler(cfg, h.counted, opts); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// tally adds what the Meter counted since its last reset to m.
func (h *handlers) tally(ctx context.Context, m *measured) error {
	if err := h.meter.Settle(ctx, h.env.client); err != nil {
		return err
	}
	m.tally.add(h.meter.Take())
	return nil
}

// call invokes fn with payload and decodes its answer.
func call(ctx context.Context, fn invoke, payload []byte) (answer, error) {
	out, err := fn(ctx, payload)
	if err != nil {
		return answer{}, fmt.Errorf("bench: invoke: %w", err)
	}
	return decodeAnswer(out)
}

func (r *endpointRun) result(name string) *measured {
	m := r.results[name]
	if m == nil {
		m = &measured{}
		r.results[name] = m
	}
	return m
}

// sent is a request with the answer it got.
type sent struct {
	req request
	a   answer
}

// round measures n operations of every case of the endpoint, in the table's
// order, so that the baselines and the cases share the machine's load.
func (r *endpointRun) round(ctx context.Context, n int) error {
	firsts, err := r.first(ctx, n)
	if err != nil {
		return err
	}
	if r.record == nil {
		if err := r.baselineItems(ctx, firsts[0]); err != nil {
			return err
		}
	}
	steps := []func() error{
		func() error { return r.bare(ctx, n, false) },
		func() error { return r.bare(ctx, n, true) },
		func() error { return r.again(ctx, caseReplayWarm, firsts, r.warm, false) },
		func() error { return r.again(ctx, caseMismatchWarm, firsts, r.warm, true) },
		func() error { return r.againCold(ctx, caseReplayCold, firsts, false) },
		func() error { return r.againCold(ctx, caseMismatchCold, firsts, true) },
		func() error { return r.concurrent(ctx, max(1, n/4)) },
	}
	if r.e.external {
		steps = append(steps,
			func() error { return r.inProgress(ctx, n) },
			func() error { return r.leaseCheck(ctx, firsts) },
		)
	}
	for _, p := range r.e.points {
		steps = append(steps, func() error { return r.crashed(ctx, n, p) })
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// prepare returns n new requests, and their events.
func (r *endpointRun) prepare(ctx context.Context, n int) ([]request, error) {
	reqs := make([]request, n)
	for i := range reqs {
		var err error
		if reqs[i], err = r.e.prepare(ctx, r.h.env, r.h.tag(r.e.name)); err != nil {
			return nil, err
		}
	}
	return reqs, nil
}

func (r *endpointRun) event(req request, body, fault string) []byte {
	return proxyEvent(r.h.env.tenant, r.e.path, req.key, body, fault)
}

// first sends n new requests to the warm instance.
func (r *endpointRun) first(ctx context.Context, n int) ([]sent, error) {
	reqs, err := r.prepare(ctx, n)
	if err != nil {
		return nil, err
	}
	m := r.result(caseFirst)
	out := make([]sent, n)
	r.h.meter.Reset()
	for i, req := range reqs {
		payload := r.event(req, req.body, "")
		var s sample
		var a answer
		if err := s.run(func() (err error) { a, err = call(ctx, r.warm, payload); return err }); err != nil {
			return nil, err
		}
		m.add(s)
		m.answer(a.label())
		out[i] = sent{req: req, a: a}
	}
	if err := r.h.tally(ctx, m); err != nil {
		return nil, err
	}
	for _, s := range out {
		if s.a.status != 201 {
			return nil, fmt.Errorf("bench: %s: a first request answered %d %.300s", r.e.name, s.a.status, s.a.body)
		}
	}
	return out, nil
}

// baselineItems keeps copies of the record and the business item that the
// first request of s stored, for the bare baselines.
func (r *endpointRun) baselineItems(ctx context.Context, s sent) error {
	rec, err := getItem(ctx, r.h.env.client, r.h.env.cfg.Table("IdempotencyTable"), idempotency.NewKey(r.h.env.tenant, s.req.key).ID())
	if err != nil {
		return err
	}
	table, item, err := r.e.business(ctx, r.h.env, s.req, s.a.body)
	if err != nil {
		return err
	}
	r.record, r.business, r.businessTable = rec, item, table
	return nil
}

// withKey is a shallow copy of item under the partition key pk.
func withKey(item map[string]types.AttributeValue, pk string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = v
	}
	out["pk"] = &types.AttributeValueMemberS{Value: pk}
	return out
}

// bare measures the baselines: n conditional PutItems of the business
// item, or n TransactWriteItems of it and of a record-sized item, each
// under a new key.
func (r *endpointRun) bare(ctx context.Context, n int, txn bool) error {
	name := caseBarePut
	if txn {
		name = caseBareTxn
	}
	m := r.result(name)
	cond := aws.String("attribute_not_exists(pk)")
	r.h.meter.Reset()
	for range n {
		pk := r.h.env.tenant + "#" + r.h.tag("bare")
		business := withKey(r.business, pk)
		var s sample
		err := s.run(func() error {
			if !txn {
				_, err := r.h.counted.PutItem(ctx, &dynamodb.PutItemInput{
					TableName: aws.String(r.businessTable), Item: business, ConditionExpression: cond,
				})
				return err
			}
			_, err := r.h.counted.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{TableName: aws.String(r.h.env.cfg.Table("IdempotencyTable")), Item: withKey(r.record, pk), ConditionExpression: cond}},
				{Put: &types.Put{TableName: aws.String(r.businessTable), Item: business, ConditionExpression: cond}},
			}})
			return err
		})
		if err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		m.add(s)
		m.answer("written")
	}
	if err := r.h.tally(ctx, m); err != nil {
		return err
	}
	return nil
}

// again sends each first request again to fn: the same body (a replay) or
// another (a mismatch), checking a replay is the first answer's bytes.
func (r *endpointRun) again(ctx context.Context, name string, firsts []sent, fn invoke, mismatch bool) error {
	m := r.result(name)
	r.h.meter.Reset()
	for _, f := range firsts {
		body := f.req.body
		if mismatch {
			body = r.e.mismatch(f.req)
		}
		payload := r.event(f.req, body, "")
		var s sample
		var a answer
		if err := s.run(func() (err error) { a, err = call(ctx, fn, payload); return err }); err != nil {
			return err
		}
		m.add(s)
		label := a.label()
		if !mismatch && (a.status != f.a.status || a.body != f.a.body) {
			label += " (differs from the first!)"
		}
		m.answer(label)
	}
	if err := r.h.tally(ctx, m); err != nil {
		return err
	}
	return nil
}

// againCold is again through a new instance, which has not seen the keys.
func (r *endpointRun) againCold(ctx context.Context, name string, firsts []sent, mismatch bool) error {
	fn, err := r.h.instance(r.h.counted, false)
	if err != nil {
		return err
	}
	return r.again(ctx, name, firsts, fn, mismatch)
}

// concurrent sends groups new requests, each as duplicates identical
// requests at once, each to an instance of its own; every final answer of
// a key must be the same bytes.
func (r *endpointRun) concurrent(ctx context.Context, groups int) error {
	m := r.result(caseConcurrent)
	fns := make([]invoke, duplicates)
	for i := range fns {
		var err error
		if fns[i], err = r.h.instance(r.h.counted, false); err != nil {
			return err
		}
	}
	reqs, err := r.prepare(ctx, groups)
	if err != nil {
		return err
	}
	r.h.meter.Reset()
	for _, req := range reqs {
		payload := r.event(req, req.body, "")
		answers := make([]answer, duplicates)
		lat := make([]time.Duration, duplicates)
		errs := make([]error, duplicates)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range duplicates {
			wg.Go(func() {
				<-start
				t := time.Now()
				answers[i], errs[i] = call(ctx, fns[i], payload)
				lat[i] = time.Since(t)
			})
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		close(start)
		wg.Wait()
		runtime.ReadMemStats(&after)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		allocs := (after.Mallocs - before.Mallocs) / duplicates
		finals := map[string]bool{}
		for i, a := range answers {
			m.add(sample{d: lat[i], allocs: allocs})
			m.answer(a.label())
			if a.final() {
				finals[fmt.Sprint(a.status, a.body)] = true
			}
		}
		if len(finals) > 1 {
			m.answer("key with differing answers!")
		}
	}
	if err := r.h.tally(ctx, m); err != nil {
		return err
	}
	return nil
}

// crashFirst sends req to the crashing instance, to crash at point: a
// function error, errorType Crash (API Gateway's DEFAULT_5XX for the client).
func (r *endpointRun) crashFirst(ctx context.Context, req request, point string) error {
	out, err := r.crash(ctx, r.event(req, req.body, point))
	if fe, ok := errors.AsType[*lambdaenv.FunctionError](err); ok && fe.Type == "Crash" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bench: %s: a request crashing at %s: %w", r.e.name, point, err)
	}
	a, err := decodeAnswer(out)
	if err != nil {
		return err
	}
	return fmt.Errorf("bench: %s: a request crashing at %s answered %d %.300s", r.e.name, point, a.status, a.body)
}

// inProgress sends, for each of n requests that crashed holding their
// reservation, a duplicate within the lease.
func (r *endpointRun) inProgress(ctx context.Context, n int) error {
	fn, err := r.h.instance(r.h.counted, false)
	if err != nil {
		return err
	}
	m := r.result(caseInProgress)
	reqs, err := r.prepare(ctx, n)
	if err != nil {
		return err
	}
	for _, req := range reqs {
		if err := r.crashFirst(ctx, req, fault.AfterReserve); err != nil {
			return err
		}
		r.h.meter.Reset()
		if err := r.send(ctx, m, sample{}, fn, req); err != nil {
			return err
		}
	}
	return nil
}

// send sends req to fn as the last segment of s, and records the
// operation: its sample, its answer and the DynamoDB calls it made.
func (r *endpointRun) send(ctx context.Context, m *measured, s sample, fn invoke, req request) error {
	payload := r.event(req, req.body, "")
	var a answer
	if err := s.run(func() (err error) { a, err = call(ctx, fn, payload); return err }); err != nil {
		return err
	}
	m.add(s)
	m.answer(a.label())
	return r.h.tally(ctx, m)
}

// leaseCheck hands the checker the check each first request's reservation
// armed, due after its lease: the record is completed, and the check reads
// it and leaves it.
func (r *endpointRun) leaseCheck(ctx context.Context, firsts []sent) error {
	m := r.result(caseCheck)
	store := dynamo.New(r.h.env.client, r.h.env.cfg.Table("IdempotencyTable"))
	for _, f := range firsts {
		rec, err := store.Get(ctx, idempotency.NewKey(r.h.env.tenant, f.req.key))
		if err != nil {
			return err
		}
		ev := checkEvent(rec)
		r.h.meter.Reset()
		var s sample
		if err := s.run(func() error { return handled(r.check(ctx, ev)) }); err != nil {
			return err
		}
		m.add(s)
		m.answer("left " + strings.ToLower(string(rec.Status)))
		if err := r.h.tally(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// crashed measures the recovery of n requests that crashed at point: for a
// reservation left in progress (External, before its completion), the
// checker's check once the lease has run out and the reconciler's
// resolution, then the client's retry, to an instance that has not seen
// the key (the crashed one is gone).
func (r *endpointRun) crashed(ctx context.Context, n int, point string) error {
	fn, err := r.h.instance(r.h.counted, false)
	if err != nil {
		return err
	}
	m := r.result(caseCrash(point))
	store := dynamo.New(r.h.env.client, r.h.env.cfg.Table("IdempotencyTable"))
	reqs, err := r.prepare(ctx, n)
	if err != nil {
		return err
	}
	for _, req := range reqs {
		if err := r.crashFirst(ctx, req, point); err != nil {
			return err
		}
		key := idempotency.NewKey(r.h.env.tenant, req.key)
		rec, err := store.Get(ctx, key)
		if err != nil {
			return err
		}
		r.h.meter.Reset()
		var s sample
		if rec.Status == idempotency.StatusInProgress {
			r.h.clock.advanceTo(rec.ExpiresAt.Add(recovery.DefaultMargin))
			ev := checkEvent(rec)
			if err := s.run(func() error { return handled(r.check(ctx, ev)) }); err != nil {
				return err
			}
			item, err := getItem(ctx, r.h.env.client, r.h.env.cfg.Table("IdempotencyTable"), key.ID())
			if err != nil {
				return err
			}
			unknown, err := dynamo.RecordFromItem(item)
			if err != nil || unknown.Status != idempotency.StatusUnknown {
				return fmt.Errorf("bench: %s: the checker left a crashed reservation %s, %v", r.e.name, unknown.Status, err)
			}
			r.h.clock.advanceTo(unknown.UpdatedAt.Add(r.h.env.cfg.ProviderSettle))
			sev := modifyEvent(item)
			if err := s.run(func() error { return streamHandled(r.reconcile(ctx, sev)) }); err != nil {
				return err
			}
		}
		if err := r.send(ctx, m, s, fn, req); err != nil {
			return err
		}
	}
	return nil
}

// checkEvent is the SQS event that delivers rec's lease check.
func checkEvent(rec idempotency.Record) events.SQSEvent {
	return events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "bench-check", Body: recovery.NewCheck(rec).Encode(),
		EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:bench-check",
	}}}
}

// modifyEvent is the stream event of the MODIFY that left item in the
// idempotency table.
func modifyEvent(item map[string]types.AttributeValue) events.DynamoDBEvent {
	image := stream.FromSDK(item)
	return events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{{
		EventID: "bench-modify", EventName: string(events.DynamoDBOperationTypeModify), EventSource: "aws:dynamodb",
		EventVersion: "1.1", AWSRegion: "us-east-1",
		Change: events.DynamoDBStreamRecord{
			Keys:           map[string]events.DynamoDBAttributeValue{"pk": image["pk"]},
			NewImage:       image,
			SequenceNumber: "1",
			StreamViewType: "NEW_AND_OLD_IMAGES",
		},
	}}}
}

// handled turns an SQS handler's failures into an error.
func handled(resp events.SQSEventResponse, err error) error {
	if err == nil && len(resp.BatchItemFailures) > 0 {
		err = errors.New("bench: the checker failed its check")
	}
	return err
}

// streamHandled turns a stream handler's failures into an error.
func streamHandled(resp events.DynamoDBEventResponse, err error) error {
	if err == nil && len(resp.BatchItemFailures) > 0 {
		err = errors.New("bench: the reconciler failed its record")
	}
	return err
}

// run measures every endpoint: a warm-up round of a few operations per
// case, discarded, then rounds until each case has its samples.
func (h *handlers) run(ctx context.Context, rep *Report) error {
	runs := make([]*endpointRun, len(endpoints))
	for i, e := range endpoints {
		var err error
		if runs[i], err = h.newRun(ctx, e); err != nil {
			return err
		}
		if err := runs[i].round(ctx, 3); err != nil {
			return fmt.Errorf("%s warm-up: %w", e.name, err)
		}
		runs[i].results = map[string]*measured{}
	}
	rounds := h.opts.Settings.Rounds
	n := max(1, h.opts.Settings.Samples/rounds)
	for round := range rounds {
		for _, r := range runs {
			if err := r.round(ctx, n); err != nil {
				return fmt.Errorf("%s: %w", r.e.name, err)
			}
		}
		h.opts.progress("handlers: round %d of %d done", round+1, rounds)
	}
	var all Tally
	for _, r := range runs {
		rep.Rows = append(rep.Rows, r.rows()...)
		for _, m := range r.results {
			all.add(m.tally)
		}
	}
	h.runs = runs
	rep.Notes = append(rep.Notes, fmt.Sprintf("Capacity check: DynamoDB Local reported %s WCU for the successful transactions measured, "+
		"which the item sizes put at %s WCU as AWS documents them (2 per KB item); its PutItem units were below those of the item's size in %d of %d calls.",
		num(all.LocalTxnWCU), num(all.ComputedTxnWCU), all.PutsBelow, all.CheckedPuts))
	return nil
}

// rows are the endpoint's rows, baselines first, with their ratios.
func (r *endpointRun) rows() []Row {
	names := []string{caseBarePut, caseBareTxn, caseFirst, caseReplayWarm, caseReplayCold, caseMismatchWarm, caseMismatchCold, caseConcurrent}
	if r.e.external {
		names = append(names, caseInProgress, caseCheck)
	}
	for _, p := range r.e.points {
		names = append(names, caseCrash(p))
	}
	var rows []Row
	for _, name := range names {
		m := r.results[name]
		if m == nil || m.ops == 0 {
			continue
		}
		row := m.row(r.e.name, name)
		if name == caseConcurrent {
			row.Case = fmt.Sprintf("%d concurrent duplicates", duplicates)
		}
		rows = append(rows, row)
	}
	put, txn := rows[0], rows[1]
	rows[0].Baseline, rows[1].Baseline = true, true
	for i := range rows {
		for _, base := range []Row{put, txn} {
			rows[i].compare(base, FigCalls, FigWCU, FigP50, FigP99, FigAllocs)
		}
	}
	return rows
}

// row turns the measurements into figures per operation.
func (m *measured) row(group, name string) Row {
	n := float64(m.ops)
	t := m.tally
	row := Row{
		Group: group, Case: name, N: m.ops, Answers: m.answers, Calls: map[string]float64{},
		Figures: map[string]float64{
			FigCalls:  float64(t.total()) / n,
			FigRCU:    t.RCU / n,
			FigWCU:    t.WCU / n,
			FigP50:    ms(quantile(m.lat, 0.50)),
			FigP99:    ms(quantile(m.lat, 0.99)),
			FigAllocs: float64(m.allocs) / n,
		},
	}
	if t.ComputedWCU > 0 {
		row.Figures[FigComputedWCU] = t.ComputedWCU / n
	}
	for op, c := range t.Calls {
		row.Calls[op] = float64(c) / n
	}
	return row
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
