package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency/apigw"
	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdaenv"
)

// paymentBody is the body the peers harness sends (its loadgen's).
const paymentBody = `{"amount": 1234, "currency": "usd", "customer": "cus_1"}`

// keyPlaceholder stands for the Idempotency-Key in a captured event; every
// key a benchmark sends has its length.
const keyPlaceholder = "KEY-PLACEHOLDER-0000000000000000"

// staticKeys is the authorizer's key store: every key is tenant acme's.
type staticKeys struct{}

func (staticKeys) Lookup(context.Context, string) (string, error) { return "acme", nil }

// benchStack is the devstack's request path without its HTTP server and
// pollers: the API Gateway emulator (the authorizer cached after the first
// request) in front of the api function, built as functions/api builds it,
// in Lambda execution environments, on tables of the benchmark's own. It
// logs at WARN, as the peers harness runs the devstack.
type benchStack struct {
	fn       *lambdaenv.Function
	emulator *gateway.Emulator
	prefix   string // of the benchmark's keys
}

func newBenchStack(b *testing.B) *benchStack {
	b.Helper()
	client := dynamotest.Client(b)
	names := dynamotest.Tables(b, client)
	env := names.Env()
	env[config.EnvDynamoDBEndpoint] = dynamotest.Endpoint(b)
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		b.Fatal(err)
	}
	logger := app.Logger(io.Discard, slog.LevelWarn)
	fn := lambdaenv.New("api", func() (any, error) {
		h, err := apifn.Handler(cfg, client, app.Options{Logger: logger, Metrics: io.Discard})
		if err != nil {
			return nil, err
		}
		return apigw.NewLambda(h), nil
	})
	authorizer := lambdaenv.New("authorizer", func() (any, error) {
		return auth.NewAuthorizer(staticKeys{}, logger).Handle, nil
	})
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	return &benchStack{
		fn: fn,
		emulator: &gateway.Emulator{
			Authorize: gateway.LambdaAuthorizer(authorizer),
			Invoke:    gateway.LambdaProxy(fn),
			Routes:    []gateway.Route{{Method: "POST", Resource: "/v1/payments"}},
			Logger:    logger,
		},
		prefix: "bench-" + hex.EncodeToString(tag[:]) + "-",
	}
}

// key returns the i-th key of the benchmark, as long as keyPlaceholder.
func (s *benchStack) key(i int) string {
	k := s.prefix + strconv.Itoa(i)
	return k + strings.Repeat("0", len(keyPlaceholder)-len(k))
}

// request is the harness's first payment with key.
func request(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(paymentBody))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer test-token")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "loadgen/1")
	return r
}

// serve sends r through the emulator and fails b unless it is answered 201.
func (s *benchStack) serve(b *testing.B, r *http.Request) {
	w := httptest.NewRecorder()
	s.emulator.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		b.Fatalf("status %d, want 201: %s", w.Code, w.Body)
	}
}

// event returns the proxy event the emulator gives the api function for a
// first payment, its key keyPlaceholder, as JSON.
func (s *benchStack) event(b *testing.B) []byte {
	b.Helper()
	var payload []byte
	capture := &gateway.Emulator{
		Authorize: s.emulator.Authorize,
		Routes:    s.emulator.Routes,
		Logger:    s.emulator.Logger,
	}
	capture.Invoke = func(_ context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		var err error
		payload, err = json.Marshal(ev)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusCreated}, err
	}
	capture.ServeHTTP(httptest.NewRecorder(), request(keyPlaceholder))
	if payload == nil {
		b.Fatal("the emulator did not invoke the function")
	}
	return payload
}

// cpuMeter reports the CPU time (user and system) the process spent per
// operation: the server's CPU per request, which the peers harness
// compares, where the wall time is mostly DynamoDB Local's.
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuMeter { return cpuMeter{b: b, start: processCPU(b)} }

// report reports the CPU time per operation of the n operations since the
// meter started, as cpu-ns/op.
func (m cpuMeter) report(n int) {
	if n > 0 {
		m.b.ReportMetric(float64(processCPU(m.b)-m.start)/float64(n), "cpu-ns/op")
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFirstPayment measures a first POST /v1/payments (a new key: one
// TransactWriteItems of the payment with the stored answer) against
// DynamoDB Local, the allocations and the CPU time (cpu-ns/op) of the
// process while it runs included (the SDK's connection loops):
//
//   - function: the api function's Lambda handler, the REST API event's
//     JSON in and the proxy response's JSON out, as `make bench`'s "first"
//     measures it (lambdaenv, apigw, the router, the middleware, the
//     payments handler, the store);
//   - gateway: the devstack's path without its HTTP server: the emulator
//     builds the event from the request, marshals it, invokes the function
//     and writes its decoded answer.
func BenchmarkFirstPayment(b *testing.B) {
	b.Run("function", func(b *testing.B) {
		s := newBenchStack(b)
		event := s.event(b)
		s.serve(b, request(s.key(0))) // a warm environment, its SDK connection open
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		cpu := startCPU(b)
		for b.Loop() {
			i++
			payload := bytes.ReplaceAll(event, []byte(keyPlaceholder), []byte(s.key(i)))
			out, err := s.fn.Invoke(ctx, payload)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Contains(out, []byte(`"statusCode":201`)) {
				b.Fatalf("answer %s, want 201", out)
			}
		}
		cpu.report(i)
	})
	b.Run("gateway", func(b *testing.B) {
		s := newBenchStack(b)
		s.serve(b, request(s.key(0)))
		i := 0
		b.ReportAllocs()
		cpu := startCPU(b)
		for b.Loop() {
			i++
			s.serve(b, request(s.key(i)))
		}
		cpu.report(i)
	})
}
