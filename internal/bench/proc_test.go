package bench

import (
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/oncehq/once/internal/dynamotest"
)

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want time.Duration
		ok   bool
	}{
		{"java", "4242 (java) S 1 4242 4242 0 -1 4194560 52711 0 7 0 1234 56 0 0 20 0 61 0 8047 4915445760 70187 18446744073709551615", 1290 * clockTick, true},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0", 7 * clockTick, true},
		{"truncated", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 3", 0, false},
		{"no name", "7 x R 1 7 7 0 -1 0 0 0 0 0 3 4", 0, false},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 3 y", 0, false},
		{"negative", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 -3 4", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStatCPU([]byte(tt.stat))
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseStatCPU = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestProcessCPU reads this process's CPU time before and after spinning
// for a while: it grows by about the time spun (the clock ticks are 10 ms).
func TestProcessCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, ok := processCPU(0); ok {
		t.Error("processCPU(0) read something")
	}
	before, ok := processCPU(os.Getpid())
	if !ok {
		t.Fatal("processCPU(self) could not read /proc")
	}
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	after, ok := processCPU(os.Getpid())
	if !ok {
		t.Fatal("processCPU(self) could not read /proc")
	}
	if d := after - before; d < 100*time.Millisecond {
		t.Errorf("CPU time grew by %v while spinning 300ms (%d loops), want at least 100ms", d, x)
	}
}

// TestFrontDoorDynamoDBCPU runs the front door on a DynamoDB Local of its
// own, as `make bench` does: every row has DynamoDB Local's CPU per
// request, new keys and the one-transaction limit (new keys and replays)
// some, new keys' is divided by the limit's too, once's replays' by the
// limit's replays', and the row without the stream is there.
func TestFrontDoorDynamoDBCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	rep, err := Run(t.Context(), Options{
		DynamoDB:      dynamotest.Endpoint(t),
		FreshDynamoDB: true,
		TemplatePath:  dynamotest.TemplatePath(t),
		Settings: Settings{Samples: 2, Rounds: 1, Clients: 2, Duration: 500 * time.Millisecond,
			StormKeys: 1, StormDuplicates: 1, StormWave: 1, ColdStarts: 1},
		Provider: inProcessProvider,
		Only:     []string{"throughput"},
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	rows := map[string]Row{}
	for _, r := range rep.Rows {
		if r.Group == frontDoorGroup {
			rows[r.Case] = r
		}
	}
	if len(rows) != 6 {
		t.Fatalf("front door rows %v, want 6", rows)
	}
	for c, r := range rows {
		if _, ok := r.Figures[FigDynamoCPU]; !ok {
			t.Errorf("%s: figures %v, want DynamoDB Local's CPU", c, r.Figures)
		}
		if cpu := r.Figures[FigServerCPU]; cpu <= 0 || math.IsInf(cpu, 0) || math.IsNaN(cpu) {
			t.Errorf("%s: figures %v, want the server's CPU per request, positive and finite", c, r.Figures)
		}
		// The server's CPU over the route without idempotency's, then
		// over the limit's (once's replays: the limit's replays').
		second := caseLimit
		if c == caseReplays {
			second = caseLimitReplays
		}
		for _, b := range []string{"POST " + bareResource + " (no idempotency)", second} {
			if !slices.ContainsFunc(r.Ratios, func(x Ratio) bool {
				return x.Baseline == b && x.Figure == FigServerCPU && x.Value > 0 && !math.IsInf(x.Value, 0)
			}) {
				t.Errorf("%s: ratios %v, want the server's CPU over %s's", c, r.Ratios, b)
			}
		}
	}
	for _, c := range []string{"POST /v1/payments, new keys", caseLimit, caseLimitReplays} {
		if cpu := rows[c].Figures[FigDynamoCPU]; cpu <= 0 {
			t.Errorf("%s: DynamoDB Local CPU %v ms per request, want some", c, cpu)
		}
	}
	newKeys := rows["POST /v1/payments, new keys"]
	if !slices.ContainsFunc(newKeys.Ratios, func(x Ratio) bool { return x.Baseline == caseLimit && x.Figure == FigDynamoCPU && x.Value > 0 }) {
		t.Errorf("new keys: ratios %v, want DynamoDB Local's CPU over the limit's", newKeys.Ratios)
	}
	if replays := rows[caseReplays]; !slices.ContainsFunc(replays.Ratios, func(x Ratio) bool {
		return x.Baseline == caseLimitReplays && x.Figure == FigDynamoCPU && x.Value > 0
	}) {
		t.Errorf("once's replays: ratios %v, want DynamoDB Local's CPU over the limit's replays", replays.Ratios)
	}
	if r := rows[casePlain]; r.Figures[FigReqPerSec] <= 0 || r.Figures[FigErrors] != 0 {
		t.Errorf("%s: %v", casePlain, r.Figures)
	}
}
