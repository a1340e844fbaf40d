package dynamo_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/dynamotest"
)

// randomBytes returns n incompressible bytes.
func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// blobs returns n effects inserting items of size bytes into table, keyed
// by prefix and their index.
func blobs(t *testing.T, table, prefix string, n, size int) []idempotency.Effect {
	t.Helper()
	blob := randomBytes(t, size)
	out := make([]idempotency.Effect, n)
	for i := range out {
		out[i] = dynamo.Insert(table, "pk", map[string]any{"pk": fmt.Sprintf("%s#%d", prefix, i), "blob": blob})
	}
	return out
}

// TestTransactionLimits: the record, its answer's chunk items and the
// effects go in one TransactWriteItems, which DynamoDB limits to 100 items
// and 4 MB (DynamoDB Local enforces both, with a ValidationException). A
// write over either is refused before it is sent with ErrTooLarge (the
// documented response_too_large), writing nothing; one at the limits is
// written.
func TestTransactionLimits(t *testing.T) {
	store, client, names := newStore(t)
	payments := names.ByLogicalID["PaymentsTable"]
	oneMiB := randomBytes(t, 1<<20) // three chunk items
	tests := []struct {
		name    string
		body    []byte
		effects func(prefix string) []idempotency.Effect
		wantErr bool
	}{
		{"chunks and effects over 4 MB", oneMiB, func(p string) []idempotency.Effect { return blobs(t, payments, p, 10, 340_000) }, true},
		{"chunks and effects over 100 items", oneMiB, func(p string) []idempotency.Effect { return blobs(t, payments, p, 97, 10) }, true},
		{"effects alone over 4 MB", []byte(`{}`), func(p string) []idempotency.Effect { return blobs(t, payments, p, 13, 340_000) }, true},
		{"100 items", oneMiB, func(p string) []idempotency.Effect { return blobs(t, payments, p, 96, 10) }, false},
		{"just under 4 MB", oneMiB, func(p string) []idempotency.Effect { return blobs(t, payments, p, 9, 340_000) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := idempotency.NewKey("acme", tt.name)
			rec := completedRecord(k, "", time.Now().Add(time.Hour))
			rec.Response.Body = tt.body
			effects := tt.effects(k.ID())
			err := store.Commit(t.Context(), rec, effects, time.Now())
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, dynamo.ErrTooLarge)) {
				t.Fatalf("Commit(%d effects) = %v, want ErrTooLarge: %v", len(effects), err, tt.wantErr)
			}
			_, getErr := store.Get(t.Context(), k)
			if stored := getErr == nil; stored == tt.wantErr {
				t.Errorf("record stored: %v (Get: %v), want %v", stored, getErr, !tt.wantErr)
			}
			if got := dynamotest.Exists(t, client, payments, k.ID()+"#0"); got == tt.wantErr {
				t.Errorf("first effect written: %v, want %v", got, !tt.wantErr)
			}
			if tt.wantErr {
				if n := len(chunkItems(t, client, names.ByLogicalID["IdempotencyTable"], k)); n != 0 {
					t.Errorf("%d chunk items left, want none", n)
				}
			}
		})
	}
}

// TestRecordItemBounds: what grows with the user's input besides the
// answer's body (which moves to chunk items) is bounded, so that the
// record's item never reaches DynamoDB's 400 KB (a ValidationException, 500
// internal_error): the request an External record keeps (MaxRequest,
// refused at the reservation as 413 payload_too_large), the answer's
// headers (refused as response_too_large) and a multi-step request's data
// (MaxData). Each is refused before anything is written.
func TestRecordItemBounds(t *testing.T) {
	store, _, _ := newStore(t)
	ctx := t.Context()
	now := time.Now()
	big := strings.Repeat("x", 420_000)

	t.Run("request", func(t *testing.T) {
		k := idempotency.NewKey("acme", "request")
		rec := reservedRecord(k, "lease", now.Add(time.Minute))
		rec.External = true
		rec.Request = []byte(`{"note":"` + big + `"}`)
		err := store.Reserve(ctx, rec, nil, now)
		if !errors.Is(err, dynamo.ErrRequestTooLarge) || !errors.Is(err, idempotency.ErrBodyTooLarge) {
			t.Errorf("Reserve(request of %d bytes) = %v, want ErrRequestTooLarge (ErrBodyTooLarge)", len(rec.Request), err)
		}
		if _, err := store.Get(ctx, k); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("Get() = %v, want ErrNotFound", err)
		}
		rec.Request = []byte(`{"note":"` + big[:dynamo.MaxRequest-20] + `"}`)
		if err := store.Reserve(ctx, rec, nil, now); err != nil {
			t.Errorf("Reserve(request of %d bytes, under MaxRequest) = %v, want nil", len(rec.Request), err)
		}
	})
	t.Run("headers", func(t *testing.T) {
		k := idempotency.NewKey("acme", "headers")
		rec := completedRecord(k, "", now.Add(time.Hour))
		rec.Response.Header = map[string]string{"X-Large": big}
		if err := store.Commit(ctx, rec, nil, now); !errors.Is(err, dynamo.ErrTooLarge) {
			t.Errorf("Commit(headers of %d bytes) = %v, want ErrTooLarge", len(big), err)
		}
		if _, err := store.Get(ctx, k); !errors.Is(err, idempotency.ErrNotFound) {
			t.Errorf("Get() = %v, want ErrNotFound", err)
		}
	})
	t.Run("data", func(t *testing.T) {
		k := idempotency.NewKey("acme", "data")
		rec := reservedRecord(k, "lease", now.Add(time.Minute))
		rec.External = true
		if err := store.Reserve(ctx, rec, nil, now); err != nil {
			t.Fatal(err)
		}
		note := map[string]string{"note": big[:dynamo.MaxData]}
		p := idempotency.Progress{Point: "one", Data: note, Added: note, LeaseToken: "lease", ExpiresAt: now.Add(time.Minute), UpdatedAt: now, External: true}
		if err := store.Advance(ctx, k, "lease", p, nil); !errors.Is(err, dynamo.ErrDataTooLarge) {
			t.Errorf("Advance(data of %d bytes) = %v, want ErrDataTooLarge", dynamo.MaxData+4, err)
		}
		if got, err := store.Get(ctx, k); err != nil || got.Point != "" {
			t.Errorf("Get() = point %q, %v; want the reservation unchanged", got.Point, err)
		}
		note = map[string]string{"note": big[:dynamo.MaxData-4]}
		p.Data, p.Added = note, note
		if err := store.Advance(ctx, k, "lease", p, nil); err != nil {
			t.Errorf("Advance(data of MaxData bytes) = %v, want nil", err)
		}
	})
}

// grown is an item of 300 KB that growth, an Update effect, makes larger
// than DynamoDB's 400 KB: DynamoDB alone can refuse it.
func grown(t *testing.T, client *dynamodb.Client, table, pk string) dynamo.Update {
	t.Helper()
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk":   &types.AttributeValueMemberS{Value: pk},
		"blob": &types.AttributeValueMemberB{Value: randomBytes(t, 300_000)},
	}}); err != nil {
		t.Fatal(err)
	}
	return dynamo.Update{
		Table: table, Key: map[string]any{"pk": pk},
		Update: "SET #more = :more", Names: map[string]string{"#more": "more"},
		Values: map[string]any{":more": randomBytes(t, 200_000)},
	}
}

// TestItemGrownTooLarge: an Update effect that would make its item larger
// than 400 KB, which DynamoDB refuses (DynamoDB Local too: a
// TransactionCanceledException whose reason is a ValidationError, "Item
// size to update has exceeded the maximum allowed size"), fails the write
// with ErrItemTooLarge, naming the effect, which matches
// idempotency.ErrResponseTooLarge; nothing is written.
func TestItemGrownTooLarge(t *testing.T) {
	store, client, names := newStore(t)
	payments := names.ByLogicalID["PaymentsTable"]
	k := idempotency.NewKey("acme", t.Name())
	update := grown(t, client, payments, k.ID()+"#grown")
	effects := []idempotency.Effect{dynamo.Insert(payments, "pk", map[string]string{"pk": k.ID() + "#new"}), update}
	err := store.Commit(t.Context(), completedRecord(k, "", time.Now().Add(time.Hour)), effects, time.Now())
	if !errors.Is(err, dynamo.ErrItemTooLarge) || !errors.Is(err, idempotency.ErrResponseTooLarge) || !strings.Contains(err.Error(), "effect 1 on "+payments) {
		t.Errorf("Commit(an update growing its item past 400 KB) = %v, want ErrItemTooLarge (ErrResponseTooLarge) naming effect 1", err)
	}
	if _, err := store.Get(t.Context(), k); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record: %v, want none", err)
	}
	if dynamotest.Exists(t, client, payments, k.ID()+"#new") {
		t.Error("the other effect was written, want nothing")
	}
	if _, ok := dynamotest.Item(t, client, payments, k.ID()+"#grown")["more"]; ok {
		t.Error("the item grew, want it unchanged")
	}
}

// TestTooLargeWrite: through the middleware, a write over DynamoDB's
// limits (a transaction's, or an item an Update effect grows past 400 KB)
// answers as "Large answers" says, never 500 internal_error, and leaves no
// key open: Atomic commits nothing; Leased releases its reservation, so
// that a retry executes again; External completes the record with the 500
// response_too_large problem, with the effects when they fit without the
// answer, and without them when they alone are over the limits (they can
// never be written, and the key must end).
func TestTooLargeWrite(t *testing.T) {
	store, client, names := newStore(t)
	mw := newMiddleware(t, store)
	payments := names.ByLogicalID["PaymentsTable"]
	oneMiB := randomBytes(t, 1<<20)
	tests := []struct {
		name        string
		mode        idempotency.Mode
		effects     int  // of 340 KB each
		grow        bool // an Update effect growing an item past 400 KB instead, the answer small
		wantRecord  bool
		wantEffects bool
	}{
		{name: "atomic, answer and effects", mode: idempotency.Atomic, effects: 10},
		{name: "external, answer and effects", mode: idempotency.External, effects: 10, wantRecord: true, wantEffects: true},
		{name: "external, effects alone", mode: idempotency.External, effects: 13, wantRecord: true},
		{name: "atomic, an item grown too large", mode: idempotency.Atomic, grow: true},
		{name: "leased, an item grown too large", mode: idempotency.Leased, grow: true},
		{name: "external, an item grown too large", mode: idempotency.External, grow: true, wantRecord: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", t.Name())
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				w.WriteHeader(http.StatusCreated)
				if tt.grow {
					call.AddEffect(dynamo.Insert(payments, "pk", map[string]string{"pk": key.ID() + "#0"}))
					call.AddEffect(grown(t, client, payments, key.ID()+"#grown"))
					w.Write([]byte(`{"id":"small"}`))
					return
				}
				for _, e := range blobs(t, payments, key.ID(), tt.effects, 340_000) {
					call.AddEffect(e)
				}
				w.Write(oneMiB)
			})
			h := wrap(t, mw, tt.mode, fmt.Sprintf("POST /v1/large/%d", i), handler)
			w, obs := post(h, t.Name(), `{}`)
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"code":"response_too_large"`) {
				t.Errorf("answer = %d %.200s, want 500 response_too_large", w.Code, w.Body)
			}
			// An answer stored without its effects is an outcome of
			// its own (alarmed): the key ends, the effects never written.
			wantOutcome := idempotency.OutcomeStoreError
			if tt.wantRecord && !tt.wantEffects {
				wantOutcome = idempotency.OutcomeEffectsDropped
			}
			if obs.Outcome != wantOutcome || !strings.Contains(obs.Err, "too large") {
				t.Errorf("observation: outcome %s, err %q; want %s saying the write is too large", obs.Outcome, obs.Err, wantOutcome)
			}
			rec, err := store.Get(t.Context(), key)
			switch {
			case !tt.wantRecord && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record: %s (err %v), want none", rec.Status, err)
			case tt.wantRecord && (err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil ||
				rec.Response.Status != http.StatusInternalServerError || string(rec.Response.Body) != w.Body.String()):
				t.Errorf("record: %s (err %v), want COMPLETED with the 500 sent", rec.Status, err)
			}
			if got := dynamotest.Exists(t, client, payments, key.ID()+"#0"); got != tt.wantEffects {
				t.Errorf("effects written: %v, want %v", got, tt.wantEffects)
			}
			if tt.grow {
				if _, got := dynamotest.Item(t, client, payments, key.ID()+"#grown")["more"]; got {
					t.Error("the item grew past 400 KB, want it unchanged")
				}
			}
		})
	}
}

// unprocessed is a Client whose BatchGetItem leaves every key unprocessed
// the first fail times; then it reads through to the real client.
type unprocessed struct {
	dynamo.Client
	fail   int
	calls  atomic.Int32
	during func() // called at each BatchGetItem
}

func (u *unprocessed) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	n := int(u.calls.Add(1))
	if u.during != nil {
		u.during()
	}
	if n <= u.fail {
		return &dynamodb.BatchGetItemOutput{UnprocessedKeys: in.RequestItems, Responses: map[string][]map[string]types.AttributeValue{}}, nil
	}
	return u.Client.BatchGetItem(ctx, in, opts...)
}

// TestChunkReadRetry: the keys of a body's chunks that BatchGetItem leaves
// unprocessed are asked again after a backoff, at most 5 reads in all (then
// the store is unavailable: 503), and not after the context ends.
func TestChunkReadRetry(t *testing.T) {
	real, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	k := idempotency.NewKey("acme", "chunks")
	rec := completedRecord(k, "", time.Now().Add(time.Hour))
	rec.Response.Body = randomBytes(t, 1<<20)
	if err := real.Commit(t.Context(), rec, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		fail      int
		cancel    bool
		wantCalls int
		wantErr   error
	}{
		{"unprocessed twice", 2, false, 3, nil},
		{"unprocessed always", 100, false, 5, idempotency.ErrUnavailable},
		{"cancelled", 100, true, 1, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			u := &unprocessed{Client: client, fail: tt.fail}
			if tt.cancel {
				u.during = cancel
			}
			got, err := dynamo.New(u, table).Get(ctx, k)
			if tt.wantErr == nil && (err != nil || len(got.Response.Body) != len(rec.Response.Body)) {
				t.Errorf("Get() = %v, want the record with its body", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Get() = %v, want %v", err, tt.wantErr)
			}
			if got := int(u.calls.Load()); got != tt.wantCalls {
				t.Errorf("BatchGetItem called %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}

// TestRequestTooLargeToKeep: an External route keeps the canonical request
// in its record; one over MaxRequest (accepted by a MaxBody raised past
// it) answers 413 payload_too_large at its reservation, before the handler
// runs, never 500 internal_error, and leaves no record.
func TestRequestTooLargeToKeep(t *testing.T) {
	store, _, _ := newStore(t)
	mw, err := idempotency.New(idempotency.Config{Store: store, MaxBody: 1 << 20, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := mw.External("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idempotency.Begin(w, r); ok {
			runs++
			w.WriteHeader(http.StatusCreated)
		}
	}), unresolved(t))
	w, obs := post(h, "large-request", `{"note":"`+strings.Repeat("x", dynamo.MaxRequest)+`"}`)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), `"code":"payload_too_large"`) {
		t.Errorf("answer = %d %.300s, want 413 payload_too_large", w.Code, w.Body)
	}
	if runs != 0 || obs.Outcome != idempotency.OutcomeStoreError {
		t.Errorf("handler ran %d times, outcome %s; want 0, store_error", runs, obs.Outcome)
	}
	if _, err := store.Get(t.Context(), idempotency.NewKey("acme", "large-request")); !errors.Is(err, idempotency.ErrNotFound) {
		t.Errorf("record: %v, want none", err)
	}
}

// TestTooLargeRelease: a request that answers 5xx gives its reservation up
// with its release effects; release effects no write of the store can
// carry (over the transaction's limits, or growing an item past 400 KB)
// must neither keep the key reserved until its lease runs out nor be
// half-written. None is written; the client gets 500 response_too_large,
// the observation (the log line) says what was not written, and the key
// ends: Leased, which holds nothing, releases it without them (outcome
// store_error), so a retry executes again; External, whose release effects
// give its holds back, completes it with that problem (a retry replays
// it), so that no retry takes the holds a second time, the holds kept
// (outcome effects_dropped, alarmed). A Leased request
// whose completion is too large (its answer with its effects) is released
// the same way, without release effects that are too large as well.
func TestTooLargeRelease(t *testing.T) {
	store, client, names := newStore(t)
	mw := newMiddleware(t, store)
	payments := names.ByLogicalID["PaymentsTable"]
	tests := []struct {
		name      string
		mode      idempotency.Mode
		grow      bool // an Update growing an item past 400 KB, else effects over 4 MB
		complete  bool // the handler answers 201 with effects over 4 MB, else 503
		wantRetry int
	}{
		{name: "leased, effects over 4 MB", mode: idempotency.Leased, wantRetry: http.StatusCreated},
		{name: "leased completion too large, effects over 4 MB", mode: idempotency.Leased, complete: true, wantRetry: http.StatusCreated},
		{name: "leased completion too large, an item grown too large", mode: idempotency.Leased, complete: true, grow: true, wantRetry: http.StatusCreated},
		{name: "leased, an item grown too large", mode: idempotency.Leased, grow: true, wantRetry: http.StatusCreated},
		{name: "external, effects over 4 MB", mode: idempotency.External, wantRetry: http.StatusInternalServerError},
		{name: "external, an item grown too large", mode: idempotency.External, grow: true, wantRetry: http.StatusInternalServerError},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := idempotency.NewKey("acme", t.Name())
			var runs atomic.Int32
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				call, ok := idempotency.Begin(w, r)
				if !ok {
					return
				}
				if runs.Add(1) > 1 {
					w.WriteHeader(http.StatusCreated)
					return
				}
				if tt.grow {
					call.AddReleaseEffect(dynamo.Insert(payments, "pk", map[string]string{"pk": key.ID() + "#0"}))
					call.AddReleaseEffect(grown(t, client, payments, key.ID()+"#grown"))
				} else {
					for _, e := range blobs(t, payments, key.ID(), 13, 340_000) {
						call.AddReleaseEffect(e)
					}
				}
				if tt.complete {
					for _, e := range blobs(t, payments, key.ID()+"#effect", 13, 340_000) {
						call.AddEffect(e)
					}
					w.WriteHeader(http.StatusCreated)
					return
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			h := wrap(t, mw, tt.mode, fmt.Sprintf("POST /v1/release/%d", i), handler)
			w, obs := post(h, t.Name(), `{}`)
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), `"code":"response_too_large"`) ||
				w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("answer = %d %s %.200s, want 500 response_too_large (application/problem+json)", w.Code, w.Header().Get("Content-Type"), w.Body)
			}
			// External keeps its holds for good: an answer stored
			// without its release effects, an outcome of its own
			// (alarmed); Leased stores nothing.
			wantOutcome := idempotency.OutcomeStoreError
			if tt.mode == idempotency.External {
				wantOutcome = idempotency.OutcomeEffectsDropped
			}
			if obs.Outcome != wantOutcome || !strings.Contains(obs.Err, "release effects") || !strings.Contains(obs.Err, "not written") {
				t.Errorf("observation: outcome %s, err %q; want %s saying the release effects were not written", obs.Outcome, obs.Err, wantOutcome)
			}
			rec, err := store.Get(t.Context(), key)
			switch {
			case tt.mode == idempotency.Leased && !errors.Is(err, idempotency.ErrNotFound):
				t.Errorf("record: %s (err %v), want none (released)", rec.Status, err)
			case tt.mode == idempotency.External && (err != nil || rec.Status != idempotency.StatusCompleted || rec.Response == nil ||
				rec.Response.Status != http.StatusInternalServerError || string(rec.Response.Body) != w.Body.String()):
				t.Errorf("record: %s (err %v), want COMPLETED with the 500 sent", rec.Status, err)
			}
			if dynamotest.Exists(t, client, payments, key.ID()+"#0") || dynamotest.Exists(t, client, payments, key.ID()+"#effect#0") {
				t.Error("a release effect or an effect was written, want none")
			}
			if tt.grow {
				if _, got := dynamotest.Item(t, client, payments, key.ID()+"#grown")["more"]; got {
					t.Error("the item grew past 400 KB, want it unchanged")
				}
			}
			again, _ := post(h, t.Name(), `{}`)
			if again.Code != tt.wantRetry {
				t.Errorf("retry = %d %.200s, want %d", again.Code, again.Body, tt.wantRetry)
			}
		})
	}
}

// carrying writes, directly as an older version or another writer could
// have, the External reservation of key at recovery point "charged" whose
// data is past MaxData (legacy bytes of it, and a charge), its lease
// "dead" run out.
func carrying(t *testing.T, client *dynamodb.Client, table string, key idempotency.Key, fingerprint string, legacy int) idempotency.Record {
	t.Helper()
	past := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	rec := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/orders", Fingerprint: fingerprint, External: true,
		LeaseToken: "dead", ExpiresAt: past, Request: []byte(`{}`), Point: "charged",
		Data:      map[string]string{"charge": "ch_1", "legacy": strings.Repeat("x", legacy)},
		CreatedAt: past.Add(-time.Minute), UpdatedAt: past.Add(-time.Minute),
	}
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: &table, Item: dynamo.ItemFromRecord(rec)}); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestCarriedData: data a record already holds past MaxData is carried
// forward, never the reason a step fails: a take-over or a pause (the lease
// alone) and a step that adds a little succeed; a step that adds more than
// MaxData, or would make the record's item larger than DynamoDB's 400 KB
// (which DynamoDB refuses: a single UpdateItem, or a transaction with
// effects), fails with ErrDataTooLarge and writes nothing.
func TestCarriedData(t *testing.T) {
	store, client, names := newStore(t)
	records, payments := names.ByLogicalID["IdempotencyTable"], names.ByLogicalID["PaymentsTable"]
	now := time.Now()
	tests := []struct {
		name    string
		legacy  int // bytes carried
		point   string
		added   map[string]string
		effects bool
		wantErr bool
	}{
		{name: "take-over", legacy: 100_000, point: "charged"},
		{name: "take-over, nearly 400 KB carried", legacy: 390_000, point: "charged"},
		{name: "a step adding a little", legacy: 100_000, point: "shipped", added: map[string]string{"ship": "sh_1"}},
		{name: "a step adding a little, with effects", legacy: 100_000, point: "shipped", added: map[string]string{"ship": "sh_1"}, effects: true},
		{name: "a step adding over MaxData", legacy: 100_000, point: "shipped", added: map[string]string{"note": strings.Repeat("y", dynamo.MaxData+1)}, wantErr: true},
		{name: "a step past 400 KB", legacy: 360_000, point: "shipped", added: map[string]string{"note": strings.Repeat("y", 60_000)}, wantErr: true},
		{name: "a step past 400 KB, with effects", legacy: 360_000, point: "shipped", added: map[string]string{"note": strings.Repeat("y", 60_000)}, effects: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := idempotency.NewKey("acme", t.Name())
			rec := carrying(t, client, records, k, "f", tt.legacy)
			data := maps.Clone(rec.Data)
			maps.Copy(data, tt.added)
			p := idempotency.Progress{From: rec.Point, Point: tt.point, Data: data, Added: tt.added, LeaseToken: "next", ExpiresAt: now.Add(time.Minute), UpdatedAt: now, External: rec.External}
			var effects []idempotency.Effect
			if tt.effects {
				effects = append(effects, dynamo.Insert(payments, "pk", map[string]string{"pk": k.ID()}))
			}
			err := store.Advance(t.Context(), k, rec.LeaseToken, p, effects)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, dynamo.ErrDataTooLarge)) {
				t.Fatalf("Advance() = %v, want ErrDataTooLarge: %v", err, tt.wantErr)
			}
			got, err := store.Get(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			want := rec
			if !tt.wantErr {
				want.Point, want.Data, want.LeaseToken, want.ExpiresAt, want.UpdatedAt = p.Point, p.Data, p.LeaseToken, p.ExpiresAt.Truncate(time.Millisecond), p.UpdatedAt.Truncate(time.Millisecond)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("record after Advance (-want +got):\n%.2000s", diff)
			}
			if tt.effects && dynamotest.Exists(t, client, payments, k.ID()) == tt.wantErr {
				t.Errorf("effect written: %v, want %v", !tt.wantErr, !tt.wantErr)
			}
		})
	}
}

// TestRetryCarriesData: a retry of a multi-step request abandoned at a
// recovery point whose data is past MaxData (a record written before the
// bound) takes it over and finishes it, its handler adding a phase, rather
// than failing with 500 at every retry.
func TestRetryCarriesData(t *testing.T) {
	store, client, names := newStore(t)
	mw := newMiddleware(t, store)
	const route = "POST /v1/orders"
	fingerprint, err := idempotency.RequestFingerprint("POST", route, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.NewKey("acme", t.Name())
	rec := carrying(t, client, names.ByLogicalID["IdempotencyTable"], key, fingerprint, 100_000)
	var resumedAt string
	h := mw.External(route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.BeginAt(w, r, "created", nil)
		if !ok {
			return
		}
		resumedAt = call.Steps().Point()
		if err := call.Steps().Advance(r.Context(), "shipped", map[string]string{"ship": "sh_1"}); err != nil {
			t.Errorf("Steps.Advance(shipped) = %v, want nil", err)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		call.Finish("finished")
		w.WriteHeader(http.StatusCreated)
	}), unresolved(t))
	w, obs := post(h, t.Name(), `{}`)
	if w.Code != http.StatusCreated || resumedAt != "charged" {
		t.Fatalf("retry = %d %.300s (outcome %s, err %q), resumed at %q; want 201, resumed at charged", w.Code, w.Body, obs.Outcome, obs.Err, resumedAt)
	}
	got, err := store.Get(t.Context(), key)
	if err != nil || got.Status != idempotency.StatusCompleted || got.Point != "finished" ||
		got.Data["ship"] != "sh_1" || got.Data["legacy"] != rec.Data["legacy"] {
		t.Errorf("record = %s at %q (err %v; outcome %s, %q), want COMPLETED at finished with the carried data and the step's", got.Status, got.Point, err, obs.Outcome, obs.Err)
	}
}

// TestTooLargeReleaseAnswersAsStored: an External request completed with
// the response_too_large problem in place of a release whose effects are
// too large sends the very answer it stored, so that its retries replay
// what the first attempt got, even from an OnError whose answers differ
// from one call to the next (a request ID, a trace).
func TestTooLargeReleaseAnswersAsStored(t *testing.T) {
	store, _, names := newStore(t)
	payments := names.ByLogicalID["PaymentsTable"]
	var calls atomic.Int32
	mw, err := idempotency.New(idempotency.Config{
		Store:  store,
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("X-Error-Call", strconv.Itoa(int(calls.Add(1))))
			problem.Write(w, r, err)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.NewKey("acme", t.Name())
	h := mw.External("POST /v1/release-answer", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		for _, e := range blobs(t, payments, key.ID(), 13, 340_000) {
			call.AddReleaseEffect(e)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}), unresolved(t))
	first, _ := post(h, t.Name(), `{}`)
	again, _ := post(h, t.Name(), `{}`)
	if first.Code != http.StatusInternalServerError || again.Code != http.StatusInternalServerError || again.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("answers = %d, then %d (replayed %q); want 500, then that 500 replayed", first.Code, again.Code, again.Header().Get(idempotency.ReplayedHeader))
	}
	if got, want := first.Header().Get("X-Error-Call"), again.Header().Get("X-Error-Call"); got != want || first.Body.String() != again.Body.String() {
		t.Errorf("first answer (OnError call %q) %s, replay (call %q) %s; want the same answer", got, first.Body, want, again.Body)
	}
}
