package lambdaenv

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-lambda-go/lambda"
)

// Init is a function's initialisation, what its main does before
// lambda.Start: it returns the handler that lambda.Start would be given (any
// form lambda.NewHandler accepts).
type Init func() (handler any, err error)

// Function is a Lambda function run locally in execution environments. Its
// zero value is not usable; build it with New.
type Function struct {
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
// kept. A panic of the handler is passed on and its environment discarded.
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	env, err := f.acquire()
	if err != nil {
		return nil, err
	}
	healthy := false
	defer func() {
		if healthy {
			f.release(env)
		}
	}()
	out, err := env.Invoke(ctx, payload)
	// The environment's output buffer goes back to its pool as Invoke
	// returns, but only this environment reuses it, and only after release:
	// copy the result out first, as the runtime loop sends it first.
	out = bytes.Clone(out)
	healthy = true
	return out, err
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
