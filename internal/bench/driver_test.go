package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// envTestBurn, set for the test binary run as a driver (TestMain), is CPU
// time the driver spends on purpose beside its clients.
const envTestBurn = "ONCE_BENCH_TEST_BURN"

// TestMain has the test binary, run with EnvRole=RoleDriver (runDriver
// runs os.Executable), be the front door's driver as the bench's command
// is.
func TestMain(m *testing.M) {
	if os.Getenv(EnvRole) == RoleDriver {
		os.Exit(testDriver())
	}
	os.Exit(m.Run())
}

// testDriver serves the driver, spending envTestBurn's CPU time beside its
// clients when it is set.
func testDriver() int {
	var during func(context.Context)
	if s := os.Getenv(envTestBurn); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		during = func(ctx context.Context) { burn(ctx, d) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveDriver(ctx, os.Stdin, os.Stdout, during); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// burn spins until this process has used d more CPU time, or ctx ends.
func burn(ctx context.Context, d time.Duration) {
	start, ok := selfCPU()
	if !ok {
		return
	}
	x := 0
	for ctx.Err() == nil {
		for range 100000 {
			x++
		}
		if now, _ := selfCPU(); now-start >= d {
			return
		}
	}
}

// seen is what a test server of the driver received.
type seen struct {
	mu     sync.Mutex
	keys   []string
	bodies map[string]string
	n      int
}

// paymentsServer answers every POST 201, but every fail-th 500 (0: none),
// after pause, and records each key and body it got.
func paymentsServer(t *testing.T, fail int, pause time.Duration, s *seen) *httptest.Server {
	t.Helper()
	s.bodies = map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/payments" || r.Header.Get("Authorization") != "Bearer "+apiKey ||
			r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not the bench's request", http.StatusBadRequest)
			return
		}
		time.Sleep(pause)
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		s.n++
		n := s.n
		s.bodies[key] = string(b)
		if fail > 0 && n%fail == 0 {
			s.mu.Unlock()
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		s.keys = append(s.keys, key)
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestServeDriver holds the driver to its contract, over pipes as its
// parent talks to it: "ready" once it has its spec, nothing sent before
// "go", "done" when its clients are, then one JSON line with every
// request's latency, the ok and bad counts, the elapsed time, the new keys
// answered 2xx (Prefix-client-i, each once; none when replaying) and its
// own CPU time; the requests are the bench's (its API key, the key, the
// key's payment body).
func TestServeDriver(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		replay []string
		fail   int
	}{
		{name: "new keys", prefix: "run-door-1"},
		{name: "new keys, some answered 500", prefix: "run-door-2", fail: 3},
		{name: "replays", replay: []string{"k1", "k2", "k3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s seen
			srv := paymentsServer(t, tt.fail, time.Millisecond, &s)
			spec := driveSpec{URL: srv.URL + "/v1/payments", Duration: 200 * time.Millisecond, Clients: 3, Prefix: tt.prefix, Replay: tt.replay}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			done := make(chan error, 1)
			go func() {
				err := ServeDriver(t.Context(), inR, outW)
				_ = outW.CloseWithError(io.EOF)
				done <- err
			}()
			out := bufio.NewReader(outR)
			b, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := inW.Write(append(b, '\n')); err != nil {
				t.Fatal(err)
			}
			if line, err := out.ReadString('\n'); line != "ready\n" {
				t.Fatalf("first line %q (%v), want ready", line, err)
			}
			time.Sleep(50 * time.Millisecond)
			s.mu.Lock()
			early := s.n
			s.mu.Unlock()
			if early != 0 {
				t.Errorf("%d requests before go, want none", early)
			}
			if _, err := io.WriteString(inW, "go\n"); err != nil {
				t.Fatal(err)
			}
			if line, err := out.ReadString('\n'); line != "done\n" {
				t.Fatalf("second line %q (%v), want done", line, err)
			}
			rest, err := io.ReadAll(out)
			if err != nil {
				t.Fatal(err)
			}
			_ = inW.Close()
			if err := <-done; err != nil {
				t.Fatalf("ServeDriver = %v", err)
			}
			if n := strings.Count(string(rest), "\n"); n != 1 {
				t.Errorf("the answer %q has %d lines, want 1", rest, n)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(rest, &fields); err != nil {
				t.Fatalf("the answer %q: %v", rest, err)
			}
			want := []string{"bad", "cpu_ns", "elapsed_ns", "latencies_ns", "ok"}
			if tt.prefix != "" {
				want = append(want, "keys")
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, slices.Sorted(maps.Keys(fields))); diff != "" {
				t.Errorf("the answer's fields (-want +got):\n%s", diff)
			}
			var res driven
			if err := json.Unmarshal(rest, &res); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if res.OK+res.Bad != s.n || len(res.Latencies) != s.n || res.OK == 0 {
				t.Errorf("ok %d, bad %d, %d latencies; the server got %d requests", res.OK, res.Bad, len(res.Latencies), s.n)
			}
			if tt.fail > 0 && res.Bad != s.n/tt.fail {
				t.Errorf("bad %d, want the %d the server answered 500", res.Bad, s.n/tt.fail)
			}
			if tt.fail == 0 && res.Bad != 0 {
				t.Errorf("bad %d, want 0", res.Bad)
			}
			for _, l := range res.Latencies {
				if l <= 0 {
					t.Errorf("latency %v, want above 0", l)
				}
			}
			if res.Elapsed < spec.Duration || res.CPU <= 0 {
				t.Errorf("elapsed %v, CPU %v: want at least %v, and some", res.Elapsed, res.CPU, spec.Duration)
			}
			for key, body := range s.bodies {
				if want := paymentBody(key, 1999, ""); body != want {
					t.Errorf("key %s sent with %s, want %s", key, body, want)
				}
			}
			if tt.replay != nil {
				if len(res.Keys) != 0 {
					t.Errorf("replays answered keys %v, want none", res.Keys)
				}
				for key := range s.bodies {
					if !slices.Contains(tt.replay, key) {
						t.Errorf("replays sent key %q, not one of %v", key, tt.replay)
					}
				}
				return
			}
			if diff := cmp.Diff(slices.Sorted(slices.Values(s.keys)), slices.Sorted(slices.Values(res.Keys))); diff != "" {
				t.Errorf("keys (-answered 201 +answer):\n%s", diff)
			}
			if len(s.bodies) != s.n {
				t.Errorf("%d keys for %d requests, want each new", len(s.bodies), s.n)
			}
			for key := range s.bodies {
				if !strings.HasPrefix(key, tt.prefix+"-") {
					t.Errorf("key %q, want it prefixed %s-", key, tt.prefix)
				}
			}
		})
	}
}

// TestServeDriverRefuses: a spec without a URL, with both new keys and
// replays or with neither, or an input that ends before "go", ends the
// driver with an error, never a request.
func TestServeDriverRefuses(t *testing.T) {
	tests := []struct {
		name, input string
	}{
		{"no URL", `{"duration_ns":1000000,"clients":1,"prefix":"p"}` + "\n"},
		{"neither", `{"url":"http://127.0.0.1:1/x","duration_ns":1000000,"clients":1}` + "\n"},
		{"both", `{"url":"http://127.0.0.1:1/x","duration_ns":1000000,"clients":1,"prefix":"p","replay":["k"]}` + "\n"},
		{"not JSON", "hello\n"},
		{"no go", `{"url":"http://127.0.0.1:1/x","duration_ns":1000000,"clients":1,"prefix":"p"}` + "\n"},
		{"not go", `{"url":"http://127.0.0.1:1/x","duration_ns":1000000,"clients":1,"prefix":"p"}` + "\nstop\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := ServeDriver(t.Context(), strings.NewReader(tt.input), &out)
			if err == nil {
				t.Errorf("ServeDriver = nil, want an error")
			}
			if strings.Contains(out.String(), "done") {
				t.Errorf("output %q, want no run", out.String())
			}
		})
	}
}

// TestSelfCPU reads this process's CPU time (getrusage RUSAGE_SELF)
// before and after spinning: it grows by about the time spun.
func TestSelfCPU(t *testing.T) {
	before, ok := selfCPU()
	if !ok {
		t.Skip("no getrusage")
	}
	burn(t.Context(), 200*time.Millisecond)
	after, _ := selfCPU()
	if d := after - before; d < 200*time.Millisecond {
		t.Errorf("CPU time grew by %v while burning 200ms, want at least that", d)
	}
}

// TestDriverCPUNotTheServers runs the driver as the front door does, in a
// process of its own (this test binary, TestMain), the driver burning
// 700 ms of CPU beside its clients against a server in this process that
// answers after 20 ms: the server's window (this process's CPU from "go"
// to "done") does not hold the driver's CPU, which it would if the
// clients ran here.
func TestDriverCPUNotTheServers(t *testing.T) {
	if _, ok := selfCPU(); !ok {
		t.Skip("no getrusage")
	}
	const burnt = 700 * time.Millisecond
	t.Setenv(envTestBurn, burnt.String())
	var s seen
	srv := paymentsServer(t, 0, 20*time.Millisecond, &s)
	res, w, err := runDriver(t.Context(), driveSpec{URL: srv.URL + "/v1/payments", Duration: 200 * time.Millisecond, Clients: 2, Prefix: "cpu"}, 0)
	if err != nil {
		t.Fatalf("runDriver = %v", err)
	}
	if res.CPU < burnt {
		t.Fatalf("the driver used %v of CPU, want at least the %v it burnt", res.CPU, burnt)
	}
	if !w.serverRead || w.dynamoRead {
		t.Errorf("window %+v: want this process's CPU read, DynamoDB Local's not (no pid)", w)
	}
	if w.server <= 0 || w.server >= res.CPU/2 {
		t.Errorf("this process used %v while the driver ran and used %v: want some, and well below the driver's", w.server, res.CPU)
	}
	if res.OK == 0 || res.OK != len(res.Keys) {
		t.Errorf("driver answer: %d ok, %d keys, want some, one per request answered", res.OK, len(res.Keys))
	}
}
