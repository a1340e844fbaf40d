package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/stream"
)

// forgotten is forget's output.
type forgotten struct {
	Record     string    `json:"record"`
	Tenant     string    `json:"tenant"`
	Status     string    `json:"status"`
	Route      string    `json:"route"`
	LeaseToken string    `json:"lease_token"`
	ExpiresAt  time.Time `json:"expires_at"`
	Forgotten  bool      `json:"forgotten"`
}

func decodeForgotten(t *testing.T, out string) forgotten {
	t.Helper()
	var f forgotten
	if err := json.Unmarshal([]byte(out), &f); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q: want one JSON object (%v)", out, err)
	}
	return f
}

// wantRecord fails t unless key's record is want, unchanged.
func (e *env) wantRecord(t *testing.T, want idempotency.Record) {
	t.Helper()
	got, err := e.store.Get(t.Context(), want.Key)
	if err != nil || got.Status != want.Status || got.LeaseToken != want.LeaseToken {
		t.Errorf("record after forget: %s under %q, %v; want it kept, %s under %q", got.Status, got.LeaseToken, err, want.Status, want.LeaseToken)
	}
}

// TestForget: forget shows an UNKNOWN record, deletes it only with
// -confirm naming the lease token it shows, and logs the deletion as JSON.
func TestForget(t *testing.T) {
	e := newEnv(t)
	for _, args := range []func(idempotency.Record) []string{
		func(rec idempotency.Record) []string { return []string{rec.Key.ID()} },
		func(idempotency.Record) []string { return []string{"-tenant", "acme", "-key", "order-77"} },
	} {
		rec := e.record(t, "acme", "order-77", idempotency.StatusUnknown, time.Hour)
		code, out, errOut := e.run(t, append([]string{"forget"}, args(rec)...)...)
		if code != 1 || !strings.Contains(errOut, "-confirm "+rec.LeaseToken) {
			t.Errorf("forget without -confirm = exit %d %q, want 1 asking for -confirm with the lease token", code, errOut)
		}
		shown := decodeForgotten(t, out)
		want := forgotten{Record: rec.Key.ID(), Tenant: "acme", Status: "UNKNOWN", Route: rec.Route, LeaseToken: rec.LeaseToken,
			ExpiresAt: rec.ExpiresAt.UTC().Truncate(time.Millisecond)}
		if shown != want {
			t.Errorf("shown %+v, want %+v", shown, want)
		}
		e.wantRecord(t, rec)

		code, out, errOut = e.run(t, append([]string{"forget", "-confirm", rec.LeaseToken}, args(rec)...)...)
		if code != 0 {
			t.Fatalf("forget -confirm = exit %d %q", code, errOut)
		}
		if got := decodeForgotten(t, out); !got.Forgotten || got.Record != rec.Key.ID() {
			t.Errorf("forget -confirm printed %+v, want the record, forgotten", got)
		}
		var log struct {
			Level, Msg, Record, Tenant, Route, Status string
			Lease                                     string `json:"lease_token"`
		}
		if err := json.Unmarshal([]byte(errOut), &log); err != nil || log.Level != "INFO" || log.Record != rec.Key.ID() ||
			log.Status != "UNKNOWN" || log.Lease != rec.LeaseToken || log.Route != rec.Route {
			t.Errorf("stderr %q (%v), want one JSON log line naming the record, its status and lease token", errOut, err)
		}
		if _, err := e.store.Get(t.Context(), rec.Key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("Get after forget = %v, want ErrNotFound", err)
		}
		if strings.Contains(out+errOut, "order-77") {
			t.Errorf("the output holds the raw key:\n%s%s", out, errOut)
		}
	}
	if code, _, errOut := e.run(t, "forget", "-confirm", "x", "acme#"+strings.Repeat("0", 64)); code != 1 || !strings.Contains(errOut, "no record") {
		t.Errorf("forget of no record = exit %d %q, want 1 saying there is none", code, errOut)
	}
	for _, args := range [][]string{{"forget"}, {"forget", "not-an-id"}, {"forget", "-tenant", "acme"}} {
		if code, _, _ := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d, want 2", args, code)
		}
	}
}

// TestForgetRefuses: forget deletes nothing but an UNKNOWN record, and
// nothing -confirm does not name.
func TestForgetRefuses(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	live := e.record(t, "acme", "live", idempotency.StatusInProgress, time.Minute)
	live.ExpiresAt = now.Add(time.Minute)
	e.put(t, live)
	leased := e.record(t, "acme", "leased", idempotency.StatusInProgress, time.Minute)
	leased.External, leased.Request = false, nil
	e.put(t, leased)
	tests := []struct {
		name string
		rec  idempotency.Record
		want string // in the error
	}{
		{"COMPLETED", e.record(t, "acme", "done", idempotency.StatusCompleted, time.Minute), "COMPLETED"},
		{"COMPLETED, expired", func() idempotency.Record {
			r := e.record(t, "acme", "done-expired", idempotency.StatusCompleted, time.Minute)
			r.ExpiresAt = now.Add(-time.Hour)
			e.put(t, r)
			return r
		}(), "COMPLETED"},
		{"IN_PROGRESS within its lease", live, "may still be running"},
		{"External reservation past its lease", e.record(t, "acme", "abandoned", idempotency.StatusInProgress, time.Minute), "reannounce"},
		{"Leased reservation past its lease", leased, "free already"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confirm := tt.rec.LeaseToken
			if confirm == "" {
				confirm = "none"
			}
			code, out, errOut := e.run(t, "forget", "-confirm", confirm, tt.rec.Key.ID())
			if code != 1 || !strings.Contains(errOut, tt.want) {
				t.Errorf("forget = exit %d %q, want 1 saying %q", code, errOut, tt.want)
			}
			if got := decodeForgotten(t, out); got.Forgotten || got.Status != string(tt.rec.Status) {
				t.Errorf("printed %+v, want the record %s, not forgotten", got, tt.rec.Status)
			}
			e.wantRecord(t, tt.rec)
		})
	}

	// A record re-announced since it was shown: its lease token is no
	// longer the one confirmed.
	t.Run("changed since shown", func(t *testing.T) {
		rec := e.record(t, "acme", "stale", idempotency.StatusUnknown, time.Hour)
		if code, _, errOut := e.run(t, "reannounce", rec.Key.ID()); code != 0 {
			t.Fatalf("reannounce = exit %d %q", code, errOut)
		}
		now, err := e.store.Get(t.Context(), rec.Key)
		if err != nil {
			t.Fatal(err)
		}
		code, _, errOut := e.run(t, "forget", "-confirm", rec.LeaseToken, rec.Key.ID())
		if code != 1 || !strings.Contains(errOut, "changed since") {
			t.Errorf("forget of a changed record = exit %d %q, want 1 saying it changed", code, errOut)
		}
		e.wantRecord(t, now)
	})

	// A record that changes between forget's read and its delete (a retry
	// re-announces it, the reconciler resolves it): the fenced delete fails.
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, rec idempotency.Record)
		want   string
	}{
		{"re-announced meanwhile", func(t *testing.T, rec idempotency.Record) {
			if err := e.store.MarkUnknown(t.Context(), rec.Key, rec.LeaseToken, idempotency.NewToken(), rec.ExpiresAt, time.Now()); err != nil {
				t.Fatal(err)
			}
		}, "changed meanwhile, to UNKNOWN"},
		{"completed meanwhile", func(t *testing.T, rec idempotency.Record) {
			done := rec
			done.Status = idempotency.StatusCompleted
			done.Response = &idempotency.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}
			if err := e.store.Complete(t.Context(), done, rec.LeaseToken, nil); err != nil {
				t.Fatal(err)
			}
		}, "changed meanwhile, to COMPLETED"},
		{"released meanwhile", func(t *testing.T, rec idempotency.Record) {
			if err := e.store.Release(t.Context(), rec.Key, rec.LeaseToken, nil); err != nil {
				t.Fatal(err)
			}
		}, "gone already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.record(t, "acme", "race-"+tc.name, idempotency.StatusUnknown, time.Hour)
			db := &changing{Client: e.db, change: func() { tc.change(t, rec) }}
			cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			code := operator.New(cfg, db, e.sqs, &out, &errOut).Run(t.Context(), []string{"forget", "-confirm", rec.LeaseToken, rec.Key.ID()})
			if code != 1 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("forget = exit %d %q, want 1 saying %q", code, errOut.String(), tc.want)
			}
			if got := decodeForgotten(t, out.String()); got.Forgotten {
				t.Errorf("printed %+v, want not forgotten", got)
			}
			if db.deletes != 1 {
				t.Errorf("DeleteItem calls = %d, want 1 (fenced, not retried)", db.deletes)
			}
			got, err := e.store.Get(t.Context(), rec.Key)
			if tc.name == "released meanwhile" {
				if !errors.Is(err, idempotency.ErrNotFound) {
					t.Errorf("Get = %s, %v; want none", got.Status, err)
				}
				return
			}
			if err != nil || got.LeaseToken == rec.LeaseToken && got.Status == rec.Status {
				t.Errorf("record after forget: %s under %q, %v; want it as the change left it", got.Status, got.LeaseToken, err)
			}
		})
	}
}

// changing is a DynamoDB client that runs change once before the first
// DeleteItem: a record changing between forget's read and its delete.
type changing struct {
	*dynamodb.Client
	change  func()
	deletes int
}

func (c *changing) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if c.deletes == 0 {
		c.change()
	}
	c.deletes++
	return c.Client.DeleteItem(ctx, in, opts...)
}

// counted is a recovery.Counter that keeps what it counted.
type counted struct {
	mu    sync.Mutex
	names []string
}

func (c *counted) Count(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, names...)
}

// TestForgetNotRestored: the REMOVE a forget writes to the idempotency
// table's stream carries no TTL identity: the sweeper's filter does not
// deliver it, and the sweeper, handed it all the same, leaves the key
// absent. The same REMOVE by TTL's identity would be restored.
func TestForgetNotRestored(t *testing.T) {
	e := newEnv(t)
	var (
		mu   sync.Mutex
		seen []events.DynamoDBEventRecord
	)
	p, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t), DB: dynamotest.Client(t), Table: e.names.ByLogicalID["IdempotencyTable"], PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
		Handler: func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, ev.Records...)
			return events.DynamoDBEventResponse{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)

	rec := e.record(t, "acme", "forgotten", idempotency.StatusUnknown, time.Hour)
	if code, _, errOut := e.run(t, "forget", "-confirm", rec.LeaseToken, rec.Key.ID()); code != 0 {
		t.Fatalf("forget = exit %d %q", code, errOut)
	}
	var remove events.DynamoDBEventRecord
	lambdatest.WaitFor(t, 10*time.Second, "the forget's REMOVE on the stream", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range seen {
			if r.EventName == "REMOVE" && r.Change.Keys[dynamo.AttrPK].String() == rec.Key.ID() {
				remove = r
				return true
			}
		}
		return false
	})

	tmpl, err := samtemplate.Load(dynamotest.TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, ev := range tmpl.Functions()["SweeperFunction"].Events() {
		if ev.Type == "DynamoDB" {
			patterns, err = ev.FilterPatterns()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(patterns) == 0 {
		t.Fatal("SweeperFunction has no stream filter in template.yaml")
	}

	sweep := func(r events.DynamoDBEventRecord) (delivered bool, counts []string) {
		t.Helper()
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		delivered, err = samtemplate.MatchFilters(patterns, js)
		if err != nil {
			t.Fatal(err)
		}
		c := &counted{}
		s, err := recovery.NewSweeper(recovery.SweeperConfig{Store: e.store, Retention: config.DefaultRetention, Metrics: c})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{r}})
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("sweeper = %+v, %v; want no failures", resp, err)
		}
		return delivered, c.names
	}

	delivered, counts := sweep(remove)
	if delivered || len(counts) > 0 {
		t.Errorf("the forget's REMOVE: delivered to the sweeper %v, counted %v; want neither", delivered, counts)
	}
	if got, err := e.store.Get(t.Context(), rec.Key); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("after the sweeper: Get = %s under %q, %v; want the forgotten record absent", got.Status, got.LeaseToken, err)
	}

	// The control: the same REMOVE by DynamoDB's TTL process is restored.
	byTTL := remove
	byTTL.UserIdentity = &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"}
	delivered, counts = sweep(byTTL)
	if !delivered || len(counts) == 0 {
		t.Errorf("the same REMOVE by TTL: delivered %v, counted %v; want it delivered and restored", delivered, counts)
	}
	if got, err := e.store.Get(t.Context(), rec.Key); err != nil || got.Status != idempotency.StatusUnknown {
		t.Errorf("after the sweeper, by TTL: Get = %s, %v; want it restored UNKNOWN", got.Status, err)
	}
}
