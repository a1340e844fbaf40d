package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
)

// inProcessProvider serves the provider simulator in the test's process
// (Options.Provider): a test binary cannot be re-run as the bench's
// command.
func inProcessProvider(ctx context.Context, env []string) (string, func(), error) {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(ctx)
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := ServeProvider(ctx, func(k string) string { return vars[k] }, w)
		_ = w.CloseWithError(errors.Join(err, io.EOF))
		done <- err
	}()
	stop := func() {
		cancel()
		_ = r.Close()
		<-done
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return strings.TrimSpace(strings.TrimPrefix(line, providerReady)), stop, nil
}

// TestRunSmall runs `make bench` at a tiny size (every part but the cold
// starts, which need the built functions) and holds its table to what the
// bench promises: every endpoint's outcomes with their ratios to the bare
// baselines, replays byte-identical, no duplicate effect and no differing
// answer in the storms (and both in the route without idempotency), the
// front door's throughput with each row's ratios to both of its baselines
// (the route without idempotency, the one-transaction limit) in the
// Markdown and the JSON, the stored sizes, and JSON that round-trips.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("a bench run: seconds against DynamoDB Local")
	}
	endpoint := dynamotest.Endpoint(t)
	rep, err := Run(t.Context(), Options{
		DynamoDB:     endpoint,
		TemplatePath: dynamotest.TemplatePath(t),
		Settings: Settings{Samples: 2, Rounds: 1, Clients: 2, Duration: 300 * time.Millisecond,
			StormKeys: 3, StormDuplicates: 3, StormWave: 3, ColdStarts: 1},
		Provider: inProcessProvider,
		Only:     []string{"handlers", "stored", "throughput", "storms"},
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	byGroup := map[string][]Row{}
	for _, r := range rep.Rows {
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	for _, e := range endpoints {
		rows := map[string]Row{}
		for _, r := range byGroup[e.name] {
			rows[r.Case] = r
		}
		want := []string{caseBarePut, caseBareTxn, caseFirst, caseReplayWarm, caseReplayCold, caseMismatchWarm, caseMismatchCold}
		if e.external {
			want = append(want, caseInProgress, caseCheck)
		}
		for _, p := range e.points {
			want = append(want, caseCrash(p))
		}
		for _, c := range want {
			r, ok := rows[c]
			if !ok {
				t.Errorf("%s: no row %q", e.name, c)
				continue
			}
			if len(r.Ratios) == 0 {
				t.Errorf("%s %q: no ratios to the baselines", e.name, c)
			}
			if _, ok := r.Figures[FigCalls]; !ok {
				t.Errorf("%s %q: figures %v, want DynamoDB calls", e.name, c, r.Figures)
			}
			for label := range r.Answers {
				if strings.Contains(label, "!") {
					t.Errorf("%s %q: answers %v", e.name, c, r.Answers)
				}
			}
		}
		for _, c := range []string{caseReplayWarm, caseReplayCold} {
			if a := rows[c].Answers; a["201 replayed"] != rows[c].N {
				t.Errorf("%s %q: answers %v, want every one 201 replayed", e.name, c, a)
			}
		}
		if calls := rows[caseReplayWarm].Figures[FigCalls]; calls != 0 {
			t.Errorf("%s: a replay on the warm instance made %v DynamoDB calls, want 0 (its replay cache)", e.name, calls)
		}
		if a := rows[caseMismatchCold].Answers; a["422"] != rows[caseMismatchCold].N {
			t.Errorf("%s: mismatches answered %v, want every one 422", e.name, a)
		}
	}
	storms := byGroup[stormGroup]
	if len(storms) != len(endpoints)+1 {
		t.Fatalf("%d storm rows, want one per endpoint and the route without idempotency", len(storms))
	}
	for _, r := range storms {
		extra, differing := r.Figures[FigExtra], r.Figures[FigDiffering]
		if r.Baseline {
			if extra == 0 || differing == 0 {
				t.Errorf("%s: %v extra effects, %v keys with differing answers: want both above 0 without idempotency", r.Case, extra, differing)
			}
			continue
		}
		if extra != 0 || differing != 0 || r.Figures[FigEffectless] != 0 {
			t.Errorf("%s: %v", r.Case, r.Figures)
		}
	}
	if door := byGroup[frontDoorGroup]; len(door) != 6 || door[1].Case != caseLimit || door[2].Case != caseLimitReplays || door[4].Case != caseReplays || door[5].Case != casePlain {
		t.Errorf("front door rows %v, want 6, the limit second, its replays third, once's replays fifth, the last without the stream", door)
	} else {
		bases := []string{door[0].Case, caseLimit}
		for _, r := range door {
			if r.Figures[FigReqPerSec] <= 0 || r.Figures[FigErrors] != 0 {
				t.Errorf("front door %s: %v", r.Case, r.Figures)
			}
			if cpu, ok := r.Figures[FigServerCPU]; !ok || cpu <= 0 || math.IsInf(cpu, 0) || math.IsNaN(cpu) {
				t.Errorf("front door %s: figures %v, want the server's CPU per request, positive and finite", r.Case, r.Figures)
			}
			if r.Baseline != slices.Contains(bases, r.Case) {
				t.Errorf("front door %s: Baseline %t, want the route without idempotency and the limit", r.Case, r.Baseline)
			}
			// Each figure divided by the route without idempotency's,
			// then by the limit's (once's replays: by the limit's
			// replays).
			var got, want []string
			for _, x := range r.Ratios {
				got = append(got, x.Figure+" / "+x.Baseline)
			}
			over := bases
			if r.Case == caseReplays {
				over = []string{door[0].Case, caseLimitReplays}
			}
			for _, b := range over {
				for _, f := range []string{FigReqPerSec, FigP50, FigP99, FigServerCPU} {
					want = append(want, f+" / "+b)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("front door %s: ratios (-want +got):\n%s", r.Case, diff)
			}
		}
		if !slices.Contains(door[1].Ratios, Ratio{Baseline: caseLimit, Figure: FigReqPerSec, Value: 1}) {
			t.Errorf("the limit's ratios %v, want req/s ×1 over its own", door[1].Ratios)
		}
	}
	stored := map[string]Row{}
	for _, r := range byGroup[storedGroup] {
		stored[r.Case] = r
	}
	for _, c := range []string{"payments: record of a first request", "JSON answer of 100 KiB", "JSON answer of 1 MiB"} {
		if stored[c].Figures[FigBytes] <= 0 {
			t.Errorf("stored %q: %v, want its bytes", c, stored[c].Figures)
		}
	}
	if got := stored["JSON answer of 1 MiB"].Figures[FigBytes]; got >= 400<<10 {
		t.Errorf("a 1 MiB JSON answer stored as %v bytes, want it compressed below an item's 400 KB", got)
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatalf("WriteMarkdown = %v", err)
	}
	if n := strings.Count(md.String(), "| group | case |"); n != 1 {
		t.Errorf("the Markdown has %d tables, want 1:\n%s", n, md.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatalf("WriteJSON = %v", err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("the JSON does not decode: %v", err)
	}
	if len(back.Rows) != len(rep.Rows) {
		t.Errorf("the JSON has %d rows, want %d", len(back.Rows), len(rep.Rows))
	}
	for _, r := range back.Rows {
		if r.Group != frontDoorGroup {
			continue
		}
		over := caseLimit
		if r.Case == caseReplays {
			over = caseLimitReplays
		}
		for _, f := range []string{FigReqPerSec, FigServerCPU} {
			if !slices.ContainsFunc(r.Ratios, func(x Ratio) bool { return x.Baseline == over && x.Figure == f }) {
				t.Errorf("JSON front door %s: ratios %v, want %s over %s's", r.Case, r.Ratios, f, over)
			}
		}
		if r.Figures[FigServerCPU] <= 0 {
			t.Errorf("JSON front door %s: figures %v, want the server's CPU per request", r.Case, r.Figures)
		}
	}
	for _, want := range []string{
		"once's replays by the route without idempotency's, then by the limit's replays",
		"Server CPU: the bench process's own user and system time (getrusage RUSAGE_SELF: its children, the clients' driver among them, excluded)",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown's notes do not say %q", want)
		}
	}
	for line := range strings.Lines(md.String()) {
		if strings.Contains(line, "| "+frontDoorGroup+" |") && !regexp.MustCompile(`req/s ×[0-9.]+ ×[0-9.]+ · p50 ×[0-9.]+ ×[0-9.]+ .*· server CPU ×[0-9.]+ ×[0-9.]+`).MatchString(line) {
			t.Errorf("Markdown front door row %s: want req/s, p50 and server CPU over both baselines", line)
		}
		if strings.Contains(line, "| "+frontDoorGroup+" |") && !regexp.MustCompile(`server CPU [0-9.]+ ms/req`).MatchString(line) {
			t.Errorf("Markdown front door row %s: want the server's CPU per request", line)
		}
	}
}

// TestRunStoredOnly runs the stored part alone (-only stored): it measures
// each endpoint's record beside its business item itself, without the
// handler part, as well as the answers' records.
func TestRunStoredOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("a bench run: seconds against DynamoDB Local")
	}
	rep, err := Run(t.Context(), Options{
		DynamoDB:     dynamotest.Endpoint(t),
		TemplatePath: dynamotest.TemplatePath(t),
		Settings: Settings{Samples: 1, Rounds: 1, Clients: 1, Duration: time.Millisecond,
			StormKeys: 1, StormDuplicates: 1, StormWave: 1, ColdStarts: 1},
		Provider: inProcessProvider,
		Only:     []string{"stored"},
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	stored := map[string]Row{}
	for _, r := range rep.Rows {
		if r.Group != storedGroup {
			t.Errorf("row %s / %s, want only stored sizes", r.Group, r.Case)
		}
		stored[r.Case] = r
	}
	want := []string{"JSON answer of 100 KiB", "random bytes answer of 100 KiB", "JSON answer of 1 MiB", "random bytes answer of 1 MiB"}
	for _, e := range endpoints {
		want = append(want, e.name+": business item", e.name+": record of a first request")
	}
	for _, c := range want {
		r, ok := stored[c]
		if !ok {
			t.Errorf("no row %q", c)
			continue
		}
		if r.Figures[FigBytes] <= 0 {
			t.Errorf("stored %q: %v, want its bytes", c, r.Figures)
		}
	}
	for _, e := range endpoints {
		if r := stored[e.name+": record of a first request"]; len(r.Ratios) == 0 {
			t.Errorf("%s: record without its ratio to the business item", e.name)
		}
	}
	if len(stored) != len(want) {
		t.Errorf("%d stored rows, want %d", len(stored), len(want))
	}
}
