package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/ddblocal"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// runStack runs run with env until the test cancels it, and returns the URL it
// serves, a cancel function and run's result.
func runStack(t *testing.T, env map[string]string, stdout io.Writer) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, func(k string) string { return env[k] }, stdout, pw)
		pw.Close()
		done <- err
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "serving on "); ok {
				url, _, _ := strings.Cut(rest, " ")
				urls <- url
			}
		}
		close(urls)
	}()
	select {
	case url, ok := <-urls:
		if !ok {
			cancel()
			t.Fatalf("run = %v before serving", <-done)
		}
		return url, cancel, done
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("run did not start serving within 2 minutes")
		return "", nil, nil
	}
}

func check(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/payments",
		strings.NewReader(`{"amount": 100, "currency": "usd", "customer": "cus_1"}`))
	req.Header.Set("Authorization", "Bearer sk_test_acme")
	req.Header.Set("Idempotency-Key", "run-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /v1/payments = %d, want 201", resp.StatusCode)
	}
	resp, err = http.Get(url + "/v1/payments/pay_x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without Authorization = %d, want 401", resp.StatusCode)
	}
}

func stopped(t *testing.T, url string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v after cancel, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return within a minute of its context's end")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("still serving after run returned")
	}
}

// TestRun runs the command against the test DynamoDB endpoint.
func TestRun(t *testing.T) {
	endpoint := dynamotest.Endpoint(t)
	client := dynamotest.Client(t)
	// Tables of the test's own, which the stack creates.
	env := dynamotest.FreshNames(t, client).Env()
	maps.Copy(env, map[string]string{"DYNAMODB_ENDPOINT": endpoint, "PORT": "0", "PROVIDER_PORT": "0", "SQS_PORT": "0"})
	url, cancel, done := runStack(t, env, io.Discard)
	check(t, url)
	stopped(t, url, cancel, done)
}

// TestRunDynamoDBLocal runs the command as `make run` does: it starts its own
// DynamoDB Local, and stops it on the way out.
func TestRunDynamoDBLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	if _, err := exec.LookPath("java"); err != nil {
		skipOrFail(t, "java: %v", err)
	}
	if _, err := os.Stat("../../" + ddblocal.DefaultDir + "/DynamoDBLocal.jar"); err != nil {
		skipOrFail(t, "DynamoDB Local not fetched (scripts/dynamodb-local.sh fetch): %v", err)
	}
	var out lambdatest.Buffer
	url, cancel, done := runStack(t, map[string]string{"PORT": "0", "PROVIDER_PORT": "0", "SQS_PORT": "0"}, &out)
	check(t, url)
	stopped(t, url, cancel, done)

	var endpoint string
	for _, line := range strings.Split(out.String(), "\n") {
		var entry struct{ Msg, Endpoint string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "dynamodb local started" {
			endpoint = entry.Endpoint
		}
	}
	if endpoint == "" {
		t.Fatalf("no \"dynamodb local started\" line in the output:\n%s", out.String())
	}
	if _, err := http.Post(endpoint, "application/json", nil); err == nil {
		t.Errorf("DynamoDB Local still answers on %s after run returned", endpoint)
	}
}

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("ONCE_REQUIRE_DYNAMODB") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
