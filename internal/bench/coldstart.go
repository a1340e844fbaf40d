package bench

import (
	"context"
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

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamoclient"
)

// coldGroup is the group of the cold starts.
const coldGroup = "cold start"

// Minimal is the folder, under Options.Functions, of the baseline of the
// cold starts: a function of aws-lambda-go's runtime loop and a handler
// that returns its event (internal/bench/minimal).
const Minimal = "minimal"

// coldEvents is the event (a file of events/) each function's first
// invocation gets: a function without one is an error, so that a new
// function is measured too.
var coldEvents = map[string]string{
	"api":        "api-create-payment.json",
	"auditor":    "auditor-scheduled.json",
	"authorizer": "authorizer-valid-key.json",
	"checker":    "checker-due-check.json",
	"provider":   "provider-function-url-charge.json",
	"receipts":   "receipts-receipt-job.json",
	"reconciler": "reconciler-unknown.json",
	"resender":   "resender-retry.json",
	"retrier":    "retrier-retry.json",
	"sweeper":    "sweeper-new-reservation.json",
	"worker":     "worker-pending-payment.json",
}

// coldStarts starts each built function, ColdStarts times, as Lambda
// starts a new execution environment: its bootstrap, alone in a process,
// configured as on the devstack, under a Runtime API that hands it one
// event. It measures the time from the process's start to its first poll
// (init) and to its first answer, beside the minimal function's.
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
		config.EnvRegion+"="+dynamoclient.LocalRegion,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
		"TZ=:UTC",
	)
	eventsDir := filepath.Join(filepath.Dir(opts.TemplatePath), "events")
	opts.progress("cold starts: %d functions and the minimal one, %d starts each", len(fns), opts.Settings.ColdStarts)
	base, err := coldStart(ctx, opts, Minimal, []byte(`{"ping":true}`), env)
	if err != nil {
		return err
	}
	base.Baseline = true
	rows := []Row{base}
	for _, fn := range fns {
		file, ok := coldEvents[fn]
		if !ok {
			return fmt.Errorf("bench: no event for the cold start of %s (add one to coldEvents)", fn)
		}
		ev, err := os.ReadFile(filepath.Join(eventsDir, file))
		if err != nil {
			return err
		}
		row, err := coldStart(ctx, opts, fn, ev, env)
		if err != nil {
			return err
		}
		row.compare(base, FigP50, FigSizeMB)
		rows = append(rows, row)
	}
	rep.Rows = append(rep.Rows, rows...)
	return nil
}

// coldStart starts fn's bootstrap ColdStarts times, each time handing it ev.
func coldStart(ctx context.Context, opts Options, fn string, ev []byte, env []string) (Row, error) {
	bootstrap := filepath.Join(opts.Functions, fn, "bootstrap")
	st, err := os.Stat(bootstrap)
	if err != nil {
		return Row{}, err
	}
	var first, init []time.Duration
	answers := map[string]int{}
	for range opts.Settings.ColdStarts {
		res, err := startOnce(ctx, bootstrap, ev, env)
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
// runtimeAPI until it has answered ev, then kills it.
func startOnce(ctx context.Context, bootstrap string, ev []byte, env []string) (started, error) {
	rt, err := newRuntimeAPI(ev)
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
	case <-time.After(time.Minute):
		return started{}, errors.New("no answer within a minute")
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
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
	answered chan struct{}

	mu      sync.Mutex
	polls   int
	polled  time.Time // first poll
	at      time.Time // answer
	outcome string
	done    chan struct{}
}

const requestID = "cold-start-1"

func newRuntimeAPI(ev []byte) (*runtimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rt := &runtimeAPI{addr: ln.Addr().String(), event: ev, answered: make(chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", rt.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/{kind}", rt.result)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		rt.answer("init error")
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
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:bench")
	h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(rt.event)
}

func (rt *runtimeAPI) result(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.PathValue("kind") {
	case "response":
		rt.answer("response")
	case "error":
		rt.answer("error " + errorType(body))
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// answer records the invocation's end, once.
func (rt *runtimeAPI) answer(outcome string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.outcome != "" {
		return
	}
	rt.at, rt.outcome = time.Now(), outcome
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
