package bench

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/dynamotest"
)

// TestColdEventsCoverFunctions holds coldEvents to functions/: one event
// per function, no more, each a file of events/, so that a new function
// breaks `make test` rather than only `make bench`.
func TestColdEventsCoverFunctions(t *testing.T) {
	root := filepath.Dir(dynamotest.TemplatePath(t))
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var fns []string
	for _, e := range entries {
		if e.IsDir() {
			fns = append(fns, e.Name())
		}
	}
	var got []string
	for fn, c := range coldEvents {
		got = append(got, fn)
		if _, err := os.Stat(filepath.Join(root, "events", c.event)); err != nil {
			t.Errorf("coldEvents[%q]: %v", fn, err)
		}
		if c.ok == nil {
			t.Errorf("coldEvents[%q]: no check of its answer", fn)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(fns, got); diff != "" {
		t.Errorf("coldEvents' functions (-functions/ +coldEvents):\n%s", diff)
	}
}

// TestColdAnswers checks what each kind of function's first answer must
// be for its cold start to count.
func TestColdAnswers(t *testing.T) {
	tests := []struct {
		name   string
		ok     func([]byte) error
		answer string
		want   bool
	}{
		{"proxy 201", proxyOK, `{"statusCode":201,"body":"{}"}`, true},
		{"proxy 200", proxyOK, `{"statusCode":200}`, true},
		{"proxy 500", proxyOK, `{"statusCode":500,"body":"{}"}`, false},
		{"proxy 404", proxyOK, `{"statusCode":404}`, false},
		{"proxy 302", proxyOK, `{"statusCode":302}`, false},
		{"no proxy response", proxyOK, `{"ping":true}`, false},
		{"null for a proxy", proxyOK, `null`, false},
		{"allow", allowed, `{"principalId":"acme","policyDocument":{"Statement":[{"Effect":"Allow"}]}}`, true},
		{"deny", allowed, `{"principalId":"unknown","policyDocument":{"Statement":[{"Effect":"Deny"}]}}`, false},
		{"no statement", allowed, `{"policyDocument":{"Statement":[]}}`, false},
		{"no batch failures (null)", noBatchFailures, `{"batchItemFailures":null}`, true},
		{"no batch failures (empty)", noBatchFailures, `{"batchItemFailures":[]}`, true},
		{"a batch failure", noBatchFailures, `{"batchItemFailures":[{"itemIdentifier":"1"}]}`, false},
		{"null for a batch", noBatchFailures, `null`, false},
		{"no batch response", noBatchFailures, `{"statusCode":200}`, false},
		{"anything", anyAnswer, `null`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.ok([]byte(tt.answer))
			if got := err == nil; got != tt.want {
				t.Errorf("check(%s) = %v, want accepted %t", tt.answer, err, tt.want)
			}
		})
	}
}

// buildFunctions builds the bootstraps of pkgs (folder name: package
// directory, from the repository's root) into dir/<name>/bootstrap as
// `make bench` does: for Linux on this machine's architecture.
func buildFunctions(t *testing.T, dir string, pkgs map[string]string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the functions are built for Linux")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build the functions: %v", err)
	}
	root := filepath.Dir(dynamotest.TemplatePath(t))
	for name, pkg := range pkgs {
		cmd := exec.CommandContext(t.Context(), goBin, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w",
			"-o", filepath.Join(dir, name, "bootstrap"), pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
}

// TestStartOnceChecksTheAnswer starts the minimal function, which answers
// its event, under the bench's Runtime API: a proxy response of 500 is a
// completed invocation but not a successful one, and fails the start.
func TestStartOnceChecksTheAnswer(t *testing.T) {
	dir := t.TempDir()
	buildFunctions(t, dir, map[string]string{Minimal: "./internal/bench/minimal"})
	bootstrap := filepath.Join(dir, Minimal, "bootstrap")
	tests := []struct {
		event   string
		wantErr string
	}{
		{`{"statusCode":201}`, ""},
		{`{"statusCode":500}`, "status 500"},
		{`{"ping":true}`, "not a proxy response"},
	}
	for _, tt := range tests {
		t.Run(tt.event, func(t *testing.T) {
			res, err := startOnce(t.Context(), bootstrap, []byte(tt.event), nil, proxyOK, defaultColdTimeout)
			if tt.wantErr == "" {
				if err != nil || res.outcome != outcomeResponse || res.first <= 0 || res.init <= 0 {
					t.Fatalf("startOnce(%s) = %+v, %v, want a response, timed", tt.event, res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("startOnce(%s) = %+v, %v, want an error saying %q", tt.event, res, err, tt.wantErr)
			}
		})
	}
}

// TestColdStarts runs the cold-start part as `make bench` does, on the
// minimal function and the api: both built, started under the bench's
// Runtime API against the devstack, each first invocation answered as
// its coldCase expects (the api: a 2xx proxy response), timed and sized.
func TestColdStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two functions and starts a devstack")
	}
	endpoint := dynamotest.Endpoint(t)
	dir := t.TempDir()
	buildFunctions(t, dir, map[string]string{Minimal: "./internal/bench/minimal", "api": "./functions/api"})
	rep, err := Run(t.Context(), Options{
		DynamoDB:     endpoint,
		TemplatePath: dynamotest.TemplatePath(t),
		Functions:    dir,
		Settings: Settings{Samples: 1, Rounds: 1, Clients: 1, Duration: time.Millisecond,
			StormKeys: 1, StormDuplicates: 1, StormWave: 1, ColdStarts: 2},
		Provider: inProcessProvider,
		Only:     []string{"coldstarts"},
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	var got []string
	for _, r := range rep.Rows {
		if r.Group != coldGroup {
			t.Errorf("row %s / %s, want only cold starts", r.Group, r.Case)
			continue
		}
		got = append(got, r.Case)
		if diff := cmp.Diff(map[string]int{outcomeResponse: 2}, r.Answers); diff != "" {
			t.Errorf("%s: answers (-want +got):\n%s", r.Case, diff)
		}
		for _, f := range []string{FigP50, FigP99, FigInitMS, FigSizeMB} {
			if r.Figures[f] <= 0 {
				t.Errorf("%s: figures %v, want %s above 0", r.Case, r.Figures, f)
			}
		}
		if r.Figures[FigInitMS] > r.Figures[FigP50] {
			t.Errorf("%s: init %v ms after its first answer %v ms", r.Case, r.Figures[FigInitMS], r.Figures[FigP50])
		}
	}
	if diff := cmp.Diff([]string{"minimal aws-lambda-go function", "api"}, got); diff != "" {
		t.Errorf("cold-start rows (-want +got):\n%s", diff)
	}
}

// TestFunctionTimeouts: every function's cold start gets the template's
// Timeout as its invocation's deadline, and the auditor's leaves it the
// time it needs to audit (more than audit.Margin: with the minute the
// Runtime API used to give, its first invocation stopped before reading
// anything).
func TestFunctionTimeouts(t *testing.T) {
	timeouts, err := functionTimeouts(dynamotest.TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	for fn := range coldEvents {
		if timeouts[fn] <= 0 {
			t.Errorf("functionTimeouts()[%q] = %v, want the template's Timeout", fn, timeouts[fn])
		}
	}
	if got := timeouts["auditor"]; got <= audit.Margin {
		t.Errorf("the auditor's cold start gets %v, want more than audit.Margin (%v)", got, audit.Margin)
	}
}

// TestRuntimeDeadline: the invocation handed out carries the deadline of
// the timeout given, from when it is handed out.
func TestRuntimeDeadline(t *testing.T) {
	for _, timeout := range []time.Duration{10 * time.Second, 5 * time.Minute} {
		rt, err := newRuntimeAPI([]byte(`{}`), timeout)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := http.Get("http://" + rt.addr + "/2018-06-01/runtime/invocation/next")
		if err != nil {
			rt.close()
			t.Fatal(err)
		}
		resp.Body.Close()
		rt.close()
		ms, err := strconv.ParseInt(resp.Header.Get("Lambda-Runtime-Deadline-Ms"), 10, 64)
		if err != nil {
			t.Fatalf("Lambda-Runtime-Deadline-Ms = %q: %v", resp.Header.Get("Lambda-Runtime-Deadline-Ms"), err)
		}
		if d := time.UnixMilli(ms).Sub(start); d < timeout-time.Second || d > timeout+5*time.Second {
			t.Errorf("timeout %v: deadline %v after the poll, want about %v", timeout, d, timeout)
		}
	}
}
