package lambdaenv

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Init is a function's initialisation, what its main does before
// lambda.Start: it returns the handler that lambda.Start would be given (any
// form lambda.NewHandler accepts).
type Init func() (handler any, err error)

// Function is a Lambda function run locally in execution environments. Its
// zero value is not usable; build it with New.
type Function struct {
	// Logger, when set, receives the line the runtime writes to the
	// function's log for a function error (its errorType, errorMessage and
	// stack). Set it before the first invocation.
	Logger *slog.Logger

	name string
	init Init

	mu   sync.Mutex
	idle []lambda.Handler // environments waiting for an invocation
	made int              // environments initialised so far
}

// New returns the function name (for errors) whose environments are
// initialised by init.
func New(name string, init Init) *Function {
	return &Function{name: name, init: init}
}

// Invoke runs one invocation with payload in an idle environment, or in a
// new one when all are busy, and returns a copy of its result: the bytes are
// the caller's, whatever other invocations run. An init error is the
// invocation's error (Lambda's Runtime.InitError), and no environment is
// kept. A panic of the handler is the invocation's *FunctionError, as
// aws-lambda-go reports it, and its environment is discarded, as the runtime
// ends the process after reporting it: the next invocation gets another
// environment (a cold start when none is idle). An error the handler returns
// (or the runtime's failure to decode the event for it) is a *FunctionError
// too, with the errorType and errorMessage aws-lambda-go reports for it (the
// error's type name, "errorString" for errors.New; a
// messages.InvokeResponse_Error as it is), and the environment is kept, as
// the runtime goes on, unless that error says the runtime exits
// (ShouldExit): the caller sees only the type and message, as a Lambda
// caller does.
func (f *Function) Invoke(ctx context.Context, payload []byte) (out []byte, err error) {
	env, err := f.acquire()
	if err != nil {
		return nil, err
	}
	defer func() {
		if v := recover(); v != nil {
			fe := &FunctionError{Function: f.name, Type: errorType(v), Message: fmt.Sprintf("%v", v), Exit: true}
			f.log(ctx, fe, string(debug.Stack()))
			out, err = nil, fe
		}
	}()
	out, err = env.Invoke(ctx, payload)
	// The environment's output buffer goes back to its pool as Invoke
	// returns, but only this environment reuses it, and only after release:
	// copy the result out first, as the runtime loop sends it first.
	out = bytes.Clone(out)
	if err != nil {
		fe := returnedError(f.name, err)
		if !fe.Exit {
			f.release(env) // the runtime goes on; one that exits is discarded, as after a panic
		}
		f.log(ctx, fe, "")
		return nil, fe
	}
	f.release(env)
	return out, nil
}

// returnedError is the function error of an error a handler returned, as
// aws-lambda-go v1.55.1 reports it (lambda/errors.go, lambdaErrorResponse).
func returnedError(name string, err error) *FunctionError {
	if ive, ok := err.(messages.InvokeResponse_Error); ok { //nolint:errorlint // the runtime matches the value itself, not a wrapped one
		return &FunctionError{Function: name, Type: ive.Type, Message: ive.Message, Exit: ive.ShouldExit}
	}
	return &FunctionError{Function: name, Type: errorType(err), Message: err.Error()}
}

// log writes the line the runtime writes to the function's log for a
// function error, when Logger is set.
func (f *Function) log(ctx context.Context, fe *FunctionError, stack string) {
	if f.Logger == nil {
		return
	}
	var id string
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		id = lc.AwsRequestID
	}
	attrs := []any{"function", f.name, "aws_request_id", id, "error_type", fe.Type, "error_message", fe.Message}
	if !fe.Exit {
		f.Logger.ErrorContext(ctx, "lambdaenv: function error", attrs...)
		return
	}
	f.Logger.ErrorContext(ctx, "lambdaenv: function error, the runtime exits", append(attrs, "stack", stack)...)
}

// FunctionError is an invocation whose handler panicked or returned an
// error, as the Lambda service reports it to the caller
// (X-Amz-Function-Error: Unhandled, with the errorType and errorMessage
// aws-lambda-go's runtime sends).
type FunctionError struct {
	// Function is the function's name.
	Function string
	// Type is the errorType: the panic value's or the error's type name, or
	// its element type's for a pointer (a fault.Crash: "Crash"; a string:
	// "string"; errors.New's: "errorString"; fmt.Errorf's with %w:
	// "wrapError").
	Type string
	// Message is the errorMessage: the panic value as %v formats it, the
	// error's Error().
	Message string
	// Exit reports that the runtime exits after reporting the error, as it
	// does after a panic: the environment is discarded.
	Exit bool
}

// Error describes the function error.
func (e *FunctionError) Error() string {
	return fmt.Sprintf("lambdaenv: %s: function error %s: %s", e.Function, e.Type, e.Message)
}

// errorType names a panic value's or an error's type as aws-lambda-go
// v1.55.1 does (lambda/errors.go, getErrorType and lambdaErrorResponse,
// which it does not export).
func errorType(v any) string {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		return t.Elem().Name()
	}
	return t.Name()
}

// Provision initialises n environments ahead of any invocation, as
// provisioned concurrency does, and returns the first init error.
func (f *Function) Provision(n int) error {
	envs := make([]lambda.Handler, 0, n)
	for range n {
		env, err := f.acquire()
		if err != nil {
			return err
		}
		envs = append(envs, env)
	}
	for _, env := range envs {
		f.release(env)
	}
	return nil
}

// Environments reports how many environments have been initialised.
func (f *Function) Environments() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.made
}

func (f *Function) acquire() (lambda.Handler, error) {
	f.mu.Lock()
	if n := len(f.idle); n > 0 {
		env := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return env, nil
	}
	f.mu.Unlock()
	h, err := f.init()
	if err != nil {
		return nil, fmt.Errorf("lambdaenv: %s: init: %w", f.name, err)
	}
	f.mu.Lock()
	f.made++
	f.mu.Unlock()
	return lambda.NewHandler(h), nil
}

func (f *Function) release(env lambda.Handler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.idle = append(f.idle, env)
}
