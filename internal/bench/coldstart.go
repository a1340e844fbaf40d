package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/samtemplate"
)

// coldGroup is the group of the cold starts.
const coldGroup = "cold start"

// Minimal is the folder, under Options.Functions, of the baseline of the
// cold starts: a function of aws-lambda-go's runtime loop and a handler
// that returns its event (internal/bench/minimal).
const Minimal = "minimal"

// coldEvents is each function's first invocation in the cold starts: a
// function without one is an error, so that a new function is measured
// too (TestColdEventsCoverFunctions holds it to functions/).
var coldEvents = map[string]coldCase{
	"api":        {event: "api-create-payment.json", ok: proxyOK},
	"auditor":    {event: "auditor-scheduled.json", ok: anyAnswer},
	"authorizer": {event: "authorizer-valid-key.json", ok: allowed},
	"checker":    {event: "checker-due-check.json", ok: noBatchFailures},
	"provider":   {event: "provider-function-url-charge.json", ok: proxyOK},
	"receipts":   {event: "receipts-receipt-job.json", seed: "OutboxTable", ok: noBatchFailures},
	"reconciler": {event: "reconciler-unknown.json", ok: noBatchFailures},
	"resender":   {event: "resender-retry.json", ok: noBatchFailures},
	"retrier":    {event: "retrier-retry.json", ok: noBatchFailures},
	"sweeper":    {event: "sweeper-new-reservation.json", ok: noBatchFailures},
	"worker":     {event: "worker-pending-payment.json", ok: noBatchFailures},
}

// coldCase is a function's first invocation: its event (a file of
// events/), the table (logical ID) that a stream event's new images are
// put in before each start (the items the records are of: none when
// empty), and what a successful answer is.
type coldCase struct {
	event string
	seed  string
	ok    func(answer []byte) error
}

// anyAnswer accepts any answer: a function whose answer says nothing
// (the auditor's is null, the minimal function's its event).
func anyAnswer([]byte) error { return nil }

// proxyOK accepts an API Gateway proxy (or function URL) response of a
// 2xx status.
func proxyOK(answer []byte) error {
	var r struct {
		StatusCode *int `json:"statusCode"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || r.StatusCode == nil {
		return errors.New("not a proxy response")
	}
	if *r.StatusCode < 200 || *r.StatusCode > 299 {
		return fmt.Errorf("status %d", *r.StatusCode)
	}
	return nil
}

// allowed accepts a REQUEST authorizer's response whose policy allows
// every statement.
func allowed(answer []byte) error {
	var r struct {
		PolicyDocument struct {
			Statement []struct{ Effect string }
		} `json:"policyDocument"`
	}
	if err := json.Unmarshal(answer, &r); err != nil || len(r.PolicyDocument.Statement) == 0 {
		return errors.New("not an authorizer's policy")
	}
	for _, st := range r.PolicyDocument.Statement {
		if st.Effect != "Allow" {
			return fmt.Errorf("effect %s", st.Effect)
		}
	}
	return nil
}

// noBatchFailures accepts a stream or queue handler's response
// (events.DynamoDBEventResponse, events.SQSEventResponse) that fails no
// record.
func noBatchFailures(answer []byte) error {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(answer, &r); err != nil {
		return errors.New("not a batch response")
	}
	raw, ok := r["batchItemFailures"]
	if !ok {
		return errors.New("not a batch response")
	}
	var failures []json.RawMessage
	if err := json.Unmarshal(raw, &failures); err != nil {
		return errors.New("not a batch response")
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d batch item failures", len(failures))
	}
	return nil
}

// coldStarts starts each built function, ColdStarts times, as Lambda
// starts a new execution environment: its bootstrap, alone in a process,
// configured as on the devstack, under a Runtime API that hands it one
// event. It measures the time from the process's start to its first poll
// (init) and to its first answer, beside the minimal function's. A start
// whose first invocation does not succeed (an init or function error, or
// an answer its coldCase does not accept) fails the run.
func coldStarts(ctx context.Context, opts Options, cfg config.Config, tableEnv []string, stack *devstack.Stack, rep *Report) error {
	if runtime.GOOS != "linux" {
		rep.Notes = append(rep.Notes, "Cold starts: not measured: the functions are built for Linux.")
		return nil
	}
	entries, err := os.ReadDir(opts.Functions)
	if err != nil {
		return err
	}
	var fns []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != Minimal {
			fns = append(fns, e.Name())
		}
	}
	slices.Sort(fns)
	env := append(slices.Clip(tableEnv),
		config.EnvProviderURL+"="+cfg.ProviderURL,
		config.EnvMailURL+"="+cfg.MailURL,
		config.EnvDynamoDBEndpoint+"="+cfg.DynamoDBEndpoint,
		config.EnvSQSEndpoint+"="+stack.SQSEndpoint(),
		config.EnvCheckQueue+"="+cfg.CheckQueue,
		config.EnvCheckDLQ+"="+cfg.CheckDLQ,
		config.EnvWorkerRetryQueue+"="+cfg.WorkerRetryQueue,
		config.EnvWorkerRetryDLQ+"="+cfg.WorkerRetryDLQ,
		config.EnvReceiptRetryQueue+"="+cfg.ReceiptRetryQueue,
		config.EnvReceiptRetryDLQ+"="+cfg.ReceiptRetryDLQ,
		config.EnvProviderAuth+"="+cfg.ProviderAuth,
		config.EnvMailAuth+"="+cfg.MailAuth,
		config.EnvRegion+"="+dynamoclient.LocalRegion,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
		"TZ=:UTC",
	)
	eventsDir := filepath.Join(filepath.Dir(opts.TemplatePath), "events")
	opts.progress("cold starts: %d functions and the minimal one, %d starts each", len(fns), opts.Settings.ColdStarts)
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	timeouts, err := functionTimeouts(opts.TemplatePath)
	if err != nil {
		return err
	}
	base, err := coldStart(ctx, opts, Minimal, []byte(`{"ping":true}`), env, anyAnswer, nil, defaultColdTimeout)
	if err != nil {
		return err
	}
	base.Baseline = true
	rows := []Row{base}
	for _, fn := range fns {
		c, ok := coldEvents[fn]
		if !ok {
			return fmt.Errorf("bench: no event for the cold start of %s (add one to coldEvents)", fn)
		}
		ev, err := os.ReadFile(filepath.Join(eventsDir, c.event))
		if err != nil {
			return err
		}
		var seed func() error
		if c.seed != "" {
			seed = func() error { return seedImages(ctx, client, cfg.Table(c.seed), ev) }
		}
		timeout, ok := timeouts[fn]
		if !ok {
			return fmt.Errorf("bench: template.yaml has no Timeout for function %s", fn)
		}
		row, err := coldStart(ctx, opts, fn, ev, env, c.ok, seed, timeout)
		if err != nil {
			return err
		}
		row.compare(base, FigP50, FigSizeMB)
		rows = append(rows, row)
	}
	rep.Rows = append(rep.Rows, rows...)
	return nil
}

// seedImages puts the new image of each record of the stream event ev in
// table: the items a stream handler reads back.
func seedImages(ctx context.Context, client *dynamodb.Client, table string, ev []byte) error {
	var e events.DynamoDBEvent
	if err := json.Unmarshal(ev, &e); err != nil {
		return fmt.Errorf("bench: seed %s: %w", table, err)
	}
	for _, r := range e.Records {
		if len(r.Change.NewImage) == 0 {
			continue
		}
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: stream.ToSDK(r.Change.NewImage)}); err != nil {
			return fmt.Errorf("bench: seed %s: %w", table, err)
		}
	}
	return nil
}

// coldStart starts fn's bootstrap ColdStarts times, each time handing it
// ev (after seed, when not nil), and fails unless each first answer is
// one that ok accepts. timeout is the function's (its invocation's
// deadline).
func coldStart(ctx context.Context, opts Options, fn string, ev []byte, env []string, ok func([]byte) error, seed func() error, timeout time.Duration) (Row, error) {
	bootstrap := filepath.Join(opts.Functions, fn, "bootstrap")
	st, err := os.Stat(bootstrap)
	if err != nil {
		return Row{}, err
	}
	var first, init []time.Duration
	answers := map[string]int{}
	for range opts.Settings.ColdStarts {
		if seed != nil {
			if err := seed(); err != nil {
				return Row{}, err
			}
		}
		res, err := startOnce(ctx, bootstrap, ev, env, ok, timeout)
		if err != nil {
			return Row{}, fmt.Errorf("bench: cold start of %s: %w", fn, err)
		}
		first = append(first, res.first)
		init = append(init, res.init)
		answers[res.outcome]++
	}
	name := fn
	if fn == Minimal {
		name = "minimal aws-lambda-go function"
	}
	return Row{Group: coldGroup, Case: name, N: len(first), Answers: answers, Figures: map[string]float64{
		FigP50: ms(quantile(first, 0.5)), FigP99: ms(quantile(first, 0.99)),
		FigInitMS: ms(quantile(init, 0.5)), FigSizeMB: float64(st.Size()) / 1e6,
	}}, nil
}

// started is one cold start: the time to the function's first poll and to
// its first answer, and what the answer was.
type started struct {
	init, first time.Duration
	outcome     string
}

// startOnce runs bootstrap, with only env as its environment, under a new
// runtimeAPI until it has answered ev, then kills it. The invocation's
// deadline is timeout after it is handed out, as Lambda's is the
// function's timeout after the invocation starts. An answer other than a
// response that ok accepts, or none by the deadline (and a margin), is an
// error.
func startOnce(ctx context.Context, bootstrap string, ev []byte, env []string, ok func([]byte) error, timeout time.Duration) (started, error) {
	rt, err := newRuntimeAPI(ev, timeout)
	if err != nil {
		return started{}, err
	}
	defer rt.close()
	cmd := exec.Command(bootstrap)
	cmd.Env = append(slices.Clip(env), "AWS_LAMBDA_RUNTIME_API="+rt.addr)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return started{}, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	select {
	case <-rt.answered:
	case <-ctx.Done():
		return started{}, ctx.Err()
	case <-time.After(timeout + coldAnswerMargin):
		return started{}, fmt.Errorf("no answer within %s (the function's timeout) and %s", timeout, coldAnswerMargin)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.outcome != outcomeResponse {
		return started{}, fmt.Errorf("first invocation: %s", rt.outcome)
	}
	if err := ok(rt.body); err != nil {
		return started{}, fmt.Errorf("first invocation answered %.200q: %w", rt.body, err)
	}
	return started{init: rt.polled.Sub(t0), first: rt.at.Sub(t0), outcome: rt.outcome}, nil
}

// runtimeAPI is a minimal Lambda Runtime API
// (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html) for one
// invocation: the first GET /2018-06-01/runtime/invocation/next gets the
// event, later ones wait; the POST of its response or error, or of an init
// error, ends it.
type runtimeAPI struct {
	srv      *http.Server
	addr     string
	event    []byte
	timeout  time.Duration // the invocation's deadline, after it is handed out
	answered chan struct{}

	mu      sync.Mutex
	polls   int
	polled  time.Time // first poll
	at      time.Time // answer
	outcome string
	body    []byte // the response's
	done    chan struct{}
}

const requestID = "cold-start-1"

// defaultColdTimeout is the minimal function's timeout (the template has
// none for it), and coldAnswerMargin how long past its timeout a function's
// answer is waited for before the start fails.
const (
	defaultColdTimeout = time.Minute
	coldAnswerMargin   = 10 * time.Second
)

// functionTimeouts returns each function's Timeout in the template at path
// (Globals applied), by folder name (api, auditor, ...): the deadline its
// cold start's invocation gets, as Lambda gives it. A function that reads
// its deadline (the auditor stops a scan it has no time left for) then
// does the work of a real first invocation.
func functionTimeouts(path string) (map[string]time.Duration, error) {
	t, err := samtemplate.Load(path)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for id, f := range t.Functions() {
		var secs float64
		switch v := f.Properties["Timeout"].(type) {
		case int:
			secs = float64(v)
		case int64:
			secs = float64(v)
		case float64:
			secs = v
		default:
			return nil, fmt.Errorf("bench: function %s: Timeout %v (%T) is not a number of seconds", id, v, v)
		}
		if secs <= 0 {
			return nil, fmt.Errorf("bench: function %s: Timeout %v is not positive", id, secs)
		}
		out[samtemplate.FunctionFolder(id)] = time.Duration(secs * float64(time.Second))
	}
	return out, nil
}

// outcomeResponse is the outcome of an invocation the function answered
// (POST .../response), whatever its answer.
const outcomeResponse = "response"

func newRuntimeAPI(ev []byte, timeout time.Duration) (*runtimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rt := &runtimeAPI{addr: ln.Addr().String(), event: ev, timeout: timeout, answered: make(chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", rt.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/{kind}", rt.result)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		rt.answer("init error", nil)
		w.WriteHeader(http.StatusAccepted)
	})
	rt.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rt.srv.Serve(ln) }()
	return rt, nil
}

func (rt *runtimeAPI) close() {
	close(rt.done)
	_ = rt.srv.Close()
}

func (rt *runtimeAPI) next(w http.ResponseWriter, r *http.Request) {
	rt.mu.Lock()
	rt.polls++
	first := rt.polls == 1
	if first {
		rt.polled = time.Now()
	}
	rt.mu.Unlock()
	if !first {
		select { // one invocation only
		case <-r.Context().Done():
		case <-rt.done:
		}
		return
	}
	h := w.Header()
	h.Set("Lambda-Runtime-Aws-Request-Id", requestID)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(rt.timeout).UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bench")
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(rt.event)
}

func (rt *runtimeAPI) result(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.PathValue("kind") {
	case "response":
		rt.answer(outcomeResponse, body)
	case "error":
		rt.answer("error "+errorType(body), nil)
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// answer records the invocation's end, once.
func (rt *runtimeAPI) answer(outcome string, body []byte) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.outcome != "" {
		return
	}
	rt.at, rt.outcome, rt.body = time.Now(), outcome, body
	close(rt.answered)
}

// errorType is the errorType of a function error's body.
func errorType(body []byte) string {
	_, rest, ok := strings.Cut(string(body), `"errorType":"`)
	if !ok {
		return ""
	}
	t, _, _ := strings.Cut(rest, `"`)
	return t
}
