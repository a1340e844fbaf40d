package lambdaenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/lambdaenv"
)

type event struct {
	Caller string `json:"caller"`
	N      int    `json:"n"`
}

type result struct {
	Caller string `json:"caller"`
	N      int    `json:"n"`
	// Padding makes the result big enough that an overwrite by another
	// invocation always shows.
	Padding string `json:"padding"`
}

func echo(_ context.Context, ev event) (result, error) {
	return result{Caller: ev.Caller, N: ev.N, Padding: strings.Repeat(ev.Caller, 64)}, nil
}

func payload(t testing.TB, caller string, n int) []byte {
	t.Helper()
	b, err := json.Marshal(event{Caller: caller, N: n})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFunctionConcurrentResultsAreOwn races many goroutines through one
// Function and counts the results that are not their own invocation's.
func TestFunctionConcurrentResultsAreOwn(t *testing.T) {
	f := lambdaenv.New("echo", func() (any, error) { return echo, nil })
	const callers, each = 32, 200
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			caller := fmt.Sprintf("caller-%02d", c)
			for n := range each {
				out, err := f.Invoke(t.Context(), payload(t, caller, n))
				var got result
				if err != nil || json.Unmarshal(out, &got) != nil || got.Caller != caller || got.N != n ||
					got.Padding != strings.Repeat(caller, 64) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of %d invocations got another invocation's result (or none)", n, callers*each)
	}
	if n := f.Environments(); n < 1 || n > callers {
		t.Errorf("Environments() = %d, want 1 to %d (one per concurrent invocation at most)", n, callers)
	}
}

// TestNewHandlerReusesItsResult shows why Function exists: the bytes that
// lambda.NewHandler's Invoke returns belong to a pooled buffer, which the
// handler's next invocation overwrites. When aws-lambda-go stops doing that,
// this test fails, and Function's copy may go.
func TestNewHandlerReusesItsResult(t *testing.T) {
	h := lambda.NewHandler(echo)
	// sync.Pool may drop what is put back (often, under the race detector):
	// try a few times.
	for range 50 {
		first, err := h.Invoke(t.Context(), payload(t, "first", 1))
		if err != nil {
			t.Fatal(err)
		}
		want := string(first)
		if _, err := h.Invoke(t.Context(), payload(t, "other", 2)); err != nil {
			t.Fatal(err)
		}
		if string(first) != want {
			return // overwritten by the second invocation
		}
	}
	t.Error("lambda.NewHandler's results were never overwritten by a later invocation: " +
		"aws-lambda-go no longer reuses its output buffer; Function's copy may no longer be needed")
}

func TestFunctionReusesAnIdleEnvironment(t *testing.T) {
	inits := 0
	f := lambdaenv.New("echo", func() (any, error) { inits++; return echo, nil })
	for n := range 5 {
		out, err := f.Invoke(t.Context(), payload(t, "solo", n))
		if err != nil || !strings.Contains(string(out), fmt.Sprintf(`"n":%d`, n)) {
			t.Fatalf("Invoke #%d = %s, %v", n, out, err)
		}
	}
	if inits != 1 || f.Environments() != 1 {
		t.Errorf("init ran %d times, Environments() = %d; want 1 and 1 for sequential invocations", inits, f.Environments())
	}
}

func TestFunctionInitError(t *testing.T) {
	fail := true
	f := lambdaenv.New("flaky", func() (any, error) {
		if fail {
			return nil, errors.New("no table")
		}
		return echo, nil
	})
	_, err := f.Invoke(t.Context(), payload(t, "x", 1))
	if err == nil || !strings.Contains(err.Error(), "flaky: init: no table") {
		t.Errorf("Invoke with a failing init = %v, want the init error", err)
	}
	if f.Environments() != 0 {
		t.Errorf("Environments() = %d after a failed init, want 0", f.Environments())
	}
	fail = false
	if _, err := f.Invoke(t.Context(), payload(t, "x", 2)); err != nil {
		t.Errorf("Invoke after init recovers = %v", err)
	}
}

func TestFunctionDiscardsAPanickedEnvironment(t *testing.T) {
	var logs bytes.Buffer
	f := lambdaenv.New("panicky", func() (any, error) {
		return func(_ context.Context, ev event) (result, error) {
			if ev.N < 0 {
				panic("negative")
			}
			return result{N: ev.N}, nil
		}, nil
	})
	f.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	if _, err := f.Invoke(t.Context(), payload(t, "x", 1)); err != nil {
		t.Fatal(err)
	}
	out, err := f.Invoke(t.Context(), payload(t, "x", -1))
	var fe *lambdaenv.FunctionError
	if !errors.As(err, &fe) || out != nil {
		t.Fatalf("Invoke of a panicking handler = %s, %v, want a *FunctionError", out, err)
	}
	want := lambdaenv.FunctionError{Function: "panicky", Type: "string", Message: "negative", Exit: true}
	if diff := cmp.Diff(want, *fe); diff != "" {
		t.Errorf("FunctionError mismatch (-want +got):\n%s", diff)
	}
	if _, err := f.Invoke(t.Context(), payload(t, "x", 2)); err != nil {
		t.Fatal(err)
	}
	if got := f.Environments(); got != 2 {
		t.Errorf("Environments() = %d, want 2 (the panicked one replaced)", got)
	}
	var line struct {
		Function     string `json:"function"`
		ErrorType    string `json:"error_type"`
		ErrorMessage string `json:"error_message"`
		Stack        string `json:"stack"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	if line.Function != "panicky" || line.ErrorType != "string" || line.ErrorMessage != "negative" ||
		!strings.Contains(line.Stack, "function_test.go") {
		t.Errorf("log line = %s, want the function error with the handler's stack", logs.String())
	}
}

// crash is a panic value of a named type, as fault.Crash is.
type crash struct{ Point string }

// TestFunctionErrorAsTheRuntimeReportsIt panics with values of several kinds
// and compares each FunctionError with the errorType and errorMessage
// aws-lambda-go itself reports for the same panic (through lambda.Function,
// the handler wrapper of its RPC mode, which recovers a panic as its runtime
// loop does, with the same lambdaPanicResponse).
func TestFunctionErrorAsTheRuntimeReportsIt(t *testing.T) {
	tests := []struct {
		name  string
		panic func()
	}{
		{"string", func() { panic("boom") }},
		{"struct value", func() { panic(crash{Point: "after-reserve"}) }},
		{"pointer", func() { panic(&crash{Point: "after-complete"}) }},
		{"error", func() { panic(errors.New("broken")) }},
		{"runtime error", func() {
			var m map[string]int
			m["x"] = 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handler := func(context.Context, event) (result, error) {
				tt.panic()
				return result{}, nil
			}
			_, err := lambdaenv.New("f", func() (any, error) { return handler, nil }).Invoke(t.Context(), payload(t, "x", 1))
			var fe *lambdaenv.FunctionError
			if !errors.As(err, &fe) {
				t.Fatalf("Invoke error = %v, want a *FunctionError", err)
			}
			var resp messages.InvokeResponse
			req := &messages.InvokeRequest{
				Payload:  payload(t, "x", 1),
				Deadline: messages.InvokeRequest_Timestamp{Seconds: time.Now().Add(time.Minute).Unix()},
			}
			//lint:ignore SA1019 the RPC wrapper is the exported way to aws-lambda-go's own panic report
			if err := lambda.NewFunction(lambda.NewHandler(handler)).Invoke(req, &resp); err != nil || resp.Error == nil {
				t.Fatalf("aws-lambda-go's Invoke = %v, %+v, want its report of the panic", err, resp.Error)
			}
			got := []any{fe.Type, fe.Message, fe.Exit}
			want := []any{resp.Error.Type, resp.Error.Message, resp.Error.ShouldExit}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("errorType, errorMessage, exit mismatch with aws-lambda-go's (-want +got):\n%s", diff)
			}
			if !resp.Error.ShouldExit {
				t.Errorf("aws-lambda-go does not exit after the panic: the environment need not be discarded")
			}
		})
	}
}

// valueError is an error of a non-pointer type.
type valueError struct{ Code string }

func (e valueError) Error() string { return "value error " + e.Code }

// pointerError is an error of a pointer type.
type pointerError struct{ Code string }

func (e *pointerError) Error() string { return "pointer error " + e.Code }

// TestFunctionReturnedErrorAsTheRuntimeReportsIt has a handler return errors
// of several kinds and compares each FunctionError with the errorType and
// errorMessage aws-lambda-go reports for the same error (lambda.Function, as
// in TestFunctionErrorAsTheRuntimeReportsIt): a returned error is a function
// error too, but the runtime goes on, so the environment is kept.
func TestFunctionReturnedErrorAsTheRuntimeReportsIt(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		payload string
	}{
		{"errors.New", errors.New("Unauthorized"), `{"n":1}`},
		{"wrapped", fmt.Errorf("auth: authorize: %w", errors.New("table gone")), `{"n":1}`},
		{"value type", valueError{Code: "v"}, `{"n":1}`},
		{"pointer type", &pointerError{Code: "p"}, `{"n":1}`},
		{"the runtime's own error", messages.InvokeResponse_Error{Type: "Custom", Message: "as given"}, `{"n":1}`},
		{"the runtime's own error, exiting", messages.InvokeResponse_Error{Type: "Custom", Message: "bye", ShouldExit: true}, `{"n":1}`},
		{"an event the handler cannot decode", nil, `{"n":"one"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handler := func(context.Context, event) (result, error) { return result{}, tt.err }
			var logs bytes.Buffer
			f := lambdaenv.New("f", func() (any, error) { return handler, nil })
			f.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			out, err := f.Invoke(t.Context(), []byte(tt.payload))
			fe, ok := errors.AsType[*lambdaenv.FunctionError](err)
			if !ok || out != nil {
				t.Fatalf("Invoke = %s, %v, want a *FunctionError", out, err)
			}
			var resp messages.InvokeResponse
			req := &messages.InvokeRequest{
				Payload:  []byte(tt.payload),
				Deadline: messages.InvokeRequest_Timestamp{Seconds: time.Now().Add(time.Minute).Unix()},
			}
			//lint:ignore SA1019 the RPC wrapper is the exported way to aws-lambda-go's own error report
			if err := lambda.NewFunction(lambda.NewHandler(handler)).Invoke(req, &resp); err != nil || resp.Error == nil {
				t.Fatalf("aws-lambda-go's Invoke = %v, %+v, want its report of the error", err, resp.Error)
			}
			want := lambdaenv.FunctionError{Function: "f", Type: resp.Error.Type, Message: resp.Error.Message, Exit: resp.Error.ShouldExit}
			if diff := cmp.Diff(want, *fe); diff != "" {
				t.Errorf("FunctionError mismatch with aws-lambda-go's report (-want +got):\n%s", diff)
			}
			if _, err := f.Invoke(t.Context(), []byte(tt.payload)); err == nil {
				t.Fatal("second Invoke succeeded, want the same function error")
			}
			// The runtime goes on after a returned error, but for one that
			// says it exits: each of those two invocations then had an
			// environment of its own.
			if want := 1 + btoi(fe.Exit); f.Environments() != want {
				t.Errorf("Environments() = %d after two returned errors (Exit %t), want %d", f.Environments(), fe.Exit, want)
			}
			var line struct {
				ErrorType    string `json:"error_type"`
				ErrorMessage string `json:"error_message"`
			}
			first, _, _ := bytes.Cut(logs.Bytes(), []byte("\n"))
			if err := json.Unmarshal(first, &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if line.ErrorType != want.Type || line.ErrorMessage != want.Message {
				t.Errorf("log line = %s, want the function error as the runtime logs it", first)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
