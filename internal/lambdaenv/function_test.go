package lambdaenv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"

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
	f := lambdaenv.New("panicky", func() (any, error) {
		return func(_ context.Context, ev event) (result, error) {
			if ev.N < 0 {
				panic("negative")
			}
			return result{N: ev.N}, nil
		}, nil
	})
	if _, err := f.Invoke(t.Context(), payload(t, "x", 1)); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if v := recover(); v != "negative" {
				t.Errorf("recovered %v, want the handler's panic", v)
			}
		}()
		_, _ = f.Invoke(t.Context(), payload(t, "x", -1))
	}()
	if _, err := f.Invoke(t.Context(), payload(t, "x", 2)); err != nil {
		t.Fatal(err)
	}
	if got := f.Environments(); got != 2 {
		t.Errorf("Environments() = %d, want 2 (the panicked one replaced)", got)
	}
}
