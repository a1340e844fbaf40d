package apigw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/dynamotest"
)

// deliverStore is a store under test with a way to write an effect into it
// and to tell whether that effect was committed.
type deliverStore struct {
	idempotency.Store
	effect    func(id string) idempotency.Effect
	committed func(t *testing.T, id string) bool
}

func deliverStores(t *testing.T) map[string]func(t *testing.T) deliverStore {
	return map[string]func(t *testing.T) deliverStore{
		"memory": func(t *testing.T) deliverStore {
			s := memory.New()
			return deliverStore{
				Store:  s,
				effect: func(id string) idempotency.Effect { return memory.Insert("payments", id, id) },
				committed: func(t *testing.T, id string) bool {
					_, ok := s.Items("payments")[id]
					return ok
				},
			}
		},
		"dynamo": func(t *testing.T) deliverStore {
			client := dynamotest.Client(t)
			names := dynamotest.Tables(t, client)
			payments := names.ByLogicalID["PaymentsTable"]
			return deliverStore{
				Store: dynamo.New(client, names.ByLogicalID["IdempotencyTable"]),
				effect: func(id string) idempotency.Effect {
					return dynamo.Insert(payments, "pk", map[string]string{"pk": id})
				},
				committed: func(t *testing.T, id string) bool { return dynamotest.Exists(t, client, payments, id) },
			}
		},
	}
}

// itemsJSON returns the start of a JSON list of items, as an export
// answers, of at least n bytes: it compresses about sixfold.
func itemsJSON(n int) string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item number %d","tags":["a","b","c"]}`, i, i)
	}
	b.WriteString(`]`)
	return b.String()
}

// auditJSON is the audit's answer: 7 MiB of JSON, which the store keeps
// (it compresses to about 1.2 MB) but whose proxy response is over
// Lambda's 6 MB.
func auditJSON() []byte { return []byte(itemsJSON(7<<20) + `}`) }

// sizedJSON returns a JSON body whose answer (201, application/json) has a
// proxy response of exactly size bytes (ResponseSize): a list of items (the
// store keeps it gzip-compressed in chunk items) and a string of
// characters JSON escapes ('<' is \u003c in encoding/json's output).
func sizedJSON(t *testing.T, size int) []byte {
	t.Helper()
	items := itemsJSON(size * 3 / 4) // its quotes take two bytes each in the proxy response
	body := func(n int) []byte {
		return []byte(items + `,"pad":"` + strings.Repeat("<\n", 1000) + strings.Repeat("x", n) + `"}`)
	}
	n := 0
	for range 5 {
		got := ResponseSize(idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: body(n)})
		if got == size {
			return body(n)
		}
		n += size - got
	}
	t.Fatalf("no body makes a proxy response of %d bytes", size)
	return nil
}

// deliverEvents are the encodings the adapter answers: a REST API's, an
// HTTP API's and a function URL's.
var deliverEvents = []string{"REST API", "HTTP API", "function URL"}

// deliverEvent is the event of a request under key in the encoding named.
func deliverEvent(name, key string) any {
	h := map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"}
	switch name {
	case "REST API":
		return v1Event(nil, map[string][]string{"Idempotency-Key": {key}}, `{"a":1}`)
	case "HTTP API":
		return v2Event(nil, h, `{"a":1}`)
	}
	url := v2Event(nil, h, `{"a":1}`)
	url.RequestContext.DomainName = "abcdefghij.lambda-url.us-east-1.on.aws"
	return url
}

// proxyAnswer is what the adapter returned, decoded.
type proxyAnswer struct {
	size     int
	status   int
	replayed bool
	body     []byte
}

func invokeRaw(t *testing.T, h http.Handler, ev any) proxyAnswer {
	t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewLambda(h).Invoke(t.Context(), payload)
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	var resp struct {
		StatusCode        int                 `json:"statusCode"`
		Headers           map[string]string   `json:"headers"`
		MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
		Body              string              `json:"body"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	replayed := resp.Headers[idempotency.ReplayedHeader] == "true" ||
		len(resp.MultiValueHeaders[idempotency.ReplayedHeader]) == 1 && resp.MultiValueHeaders[idempotency.ReplayedHeader][0] == "true"
	return proxyAnswer{size: len(out), status: resp.StatusCode, replayed: replayed, body: []byte(resp.Body)}
}

// TestUndeliverableAnswer: an answer the store keeps but Lambda cannot
// return (a proxy response over 6 MB) is refused before anything is
// committed, 500 response_too_large, on a Middleware with apigw.Deliverable:
// Atomic and Leased commit no effect and leave no record (a retry executes
// again); External, which has called out, stores the problem as its final
// answer. An answer at the limit is stored, and replayed byte for byte
// within Lambda's 6 MB, through every encoding the adapter answers.
func TestUndeliverableAnswer(t *testing.T) {
	limit := MaxResponse - ResponseHeadroom
	atLimit, overLimit, audit := sizedJSON(t, limit), sizedJSON(t, limit+1), auditJSON()
	tests := []struct {
		name         string
		mode         idempotency.Mode
		body         []byte
		wantStatus   int  // the first answer and the retry
		wantStored   bool // a COMPLETED record, replayed by the retry
		wantEffect   bool
		wantRuns     int
		wantBodySent bool // the handler's body is what the client gets
	}{
		{"audit's answer, Atomic", idempotency.Atomic, audit, 500, false, false, 2, false},
		{"one byte over, Atomic", idempotency.Atomic, overLimit, 500, false, false, 2, false},
		{"audit's answer, Leased", idempotency.Leased, audit, 500, false, false, 2, false},
		{"audit's answer, External", idempotency.External, audit, 500, true, true, 1, false},
		// An Atomic retry runs the handler, whose commit then finds the
		// record and replays it (its effects not written).
		{"at the limit, Atomic", idempotency.Atomic, atLimit, 201, true, true, 2, true},
		{"at the limit, External", idempotency.External, atLimit, 201, true, true, 1, true},
	}
	for storeName, newStore := range deliverStores(t) {
		t.Run(storeName, func(t *testing.T) {
			store := newStore(t)
			for i, tt := range tests {
				for j, evName := range deliverEvents {
					t.Run(tt.name+"/"+evName, func(t *testing.T) {
						raw := fmt.Sprintf("undeliverable-%d-%d", i, j)
						ev, key := deliverEvent(evName, raw), idempotency.NewKey("acme", raw)
						mw, err := idempotency.New(idempotency.Config{
							Store:       store,
							Tenant:      func(*http.Request) (string, bool) { return "acme", true },
							Deliverable: Deliverable,
							Logger:      slog.New(slog.DiscardHandler),
						})
						if err != nil {
							t.Fatal(err)
						}
						runs := 0
						h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
							call, ok := idempotency.Begin(w, r)
							if !ok {
								return
							}
							runs++
							call.AddEffect(store.effect(key.ID()))
							w.Header().Set("Content-Type", "application/json")
							w.WriteHeader(http.StatusCreated)
							_, _ = w.Write(tt.body)
						})
						var wrapped http.Handler
						if tt.mode == idempotency.External {
							wrapped = mw.External("POST /v1/payments", h, idempotency.ResolverFunc(func(_ context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
								t.Errorf("resolver asked about %s", rec.Key.Short())
								return idempotency.Resolution{}, errors.New("unexpected")
							}))
						} else {
							wrapped = mw.Wrap(tt.mode, "POST /v1/payments", h)
						}

						first := invokeRaw(t, wrapped, ev)
						rec, gerr := store.Get(t.Context(), key)
						t.Logf("first answer: %d, proxy response %d bytes (Lambda's limit %d); record %s (%v)", first.status, first.size, MaxResponse, rec.Status, gerr)
						if first.status != tt.wantStatus || first.size > MaxResponse {
							t.Errorf("first answer = %d, %d bytes; want %d within Lambda's %d", first.status, first.size, tt.wantStatus, MaxResponse)
						}
						if tt.wantStatus == 500 && !strings.Contains(string(first.body), `"response_too_large"`) {
							t.Errorf("first answer's body = %.200q, want the response_too_large problem", first.body)
						}
						if tt.wantBodySent && string(first.body) != string(tt.body) {
							t.Errorf("first answer's body is not the handler's (%d bytes, want %d)", len(first.body), len(tt.body))
						}
						switch {
						case tt.wantStored && (gerr != nil || rec.Status != idempotency.StatusCompleted):
							t.Errorf("record = %s (%v), want COMPLETED", rec.Status, gerr)
						case !tt.wantStored && !errors.Is(gerr, idempotency.ErrNotFound):
							t.Errorf("record = %s (%v), want none: nothing committed, nothing held", rec.Status, gerr)
						}
						if got := store.committed(t, key.ID()); got != tt.wantEffect {
							t.Errorf("effect committed: %v, want %v", got, tt.wantEffect)
						}

						again := invokeRaw(t, wrapped, ev)
						if again.status != tt.wantStatus || again.size > MaxResponse || again.replayed != tt.wantStored {
							t.Errorf("retry = %d, %d bytes, replayed %v; want %d within %d, replayed %v", again.status, again.size, again.replayed, tt.wantStatus, MaxResponse, tt.wantStored)
						}
						if tt.wantStored && string(again.body) != string(first.body) {
							t.Errorf("replay's body differs from the first answer's (%d bytes, %d)", len(again.body), len(first.body))
						}
						if runs != tt.wantRuns {
							t.Errorf("handler ran %d times, want %d", runs, tt.wantRuns)
						}
					})
				}
			}
		})
	}
}

// TestResponseSizeExact: ResponseSize's measure of a replay, in each
// encoding, is the size of the proxy response the adapter returns for it,
// byte for byte: escapes, a binary body (base64), a body without
// Content-Type (the proxy sets one), joined fields and Set-Cookie lines.
func TestResponseSizeExact(t *testing.T) {
	binary := []byte{0xff, 0xfe, 0, 1, 2, '<', '"'}
	tests := []struct {
		name   string
		header http.Header
		status int
		body   []byte
	}{
		{"JSON", http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}}, 201, []byte(`{"a":"<b> & \"c\"\n\t\u0001 é     🙂"}`)},
		{"every ASCII byte", http.Header{"Content-Type": {"text/plain"}}, 200, func() []byte {
			b := make([]byte, 128)
			for i := range b {
				b[i] = byte(i)
			}
			return b
		}()},
		{"binary", http.Header{"Content-Type": {"application/octet-stream"}}, 200, binary},
		{"no content type", http.Header{}, 201, []byte(`<html>`)},
		{"empty", http.Header{}, 204, nil},
		{"fields and cookies", http.Header{"Content-Type": {"application/json"}, "Vary": {"Accept", "Origin"}, "Set-Cookie": {"a=1; Path=/", "b=\"2\""}, "X-Odd": {"<&>\u2028"}}, 200, []byte(`{}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Leased("POST /v1/payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); !ok {
					return
				}
				for k, v := range tt.header {
					w.Header()[k] = v
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write(tt.body)
			}))
			for j, evName := range deliverEvents {
				raw := fmt.Sprintf("exact-%d", j)
				invokeRaw(t, h, deliverEvent(evName, raw))
				rec, err := store.Get(t.Context(), idempotency.NewKey("acme", raw))
				if err != nil || rec.Response == nil {
					t.Fatalf("%s: record %v, %v", evName, rec.Response, err)
				}
				replay := invokeRaw(t, h, deliverEvent(evName, raw))
				if !replay.replayed {
					t.Fatalf("%s: the second answer is not a replay", evName)
				}
				v1, v2 := responseSizes(*rec.Response)
				want := v2
				if evName == "REST API" {
					want = v1
				}
				if replay.size != want {
					t.Errorf("%s: the replay's proxy response is %d bytes, ResponseSize measures %d", evName, replay.size, want)
				}
				if got := ResponseSize(*rec.Response); got != max(v1, v2) {
					t.Errorf("ResponseSize = %d, want %d", got, max(v1, v2))
				}
			}
		})
	}
}

// TestQuotedLen: quotedLen is the length of encoding/json's string, for
// every byte and the runes it escapes.
func TestQuotedLen(t *testing.T) {
	inputs := []string{"", "plain", "<>&", "\u2028\u2029", "é🙂", "\"\\/"}
	for c := range 128 {
		inputs = append(inputs, string(rune(c)))
	}
	for _, s := range inputs {
		b, _ := json.Marshal(s)
		if got := quotedLen([]byte(s)); got != len(b) {
			t.Errorf("quotedLen(%q) = %d, want %d (%s)", s, got, len(b), b)
		}
	}
}

// BenchmarkDeliverable: what the check costs a completion, by answer size.
// TestSizeBound: the bound Deliverable checks first is never below the
// exact size, for answers of every kind (so an answer it lets through
// without measuring fits), and it lets usual answers through.
func TestSizeBound(t *testing.T) {
	quoted := strings.Repeat("\x01<>&\u2028\"\\é", 100)
	answers := map[string]idempotency.Response{
		"empty":         {Status: 204},
		"json":          {Status: 201, Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/pay_1"}, Body: []byte(`{"id":"pay_1","amount":1234}`)},
		"escaped":       {Status: 200, Header: map[string]string{"X-Odd": quoted}, Body: []byte(quoted)},
		"binary":        {Status: 200, Body: []byte{0xff, 0xfe, 0x00, 0x01, 0x80}},
		"cookies":       {Status: 200, SetCookie: []string{"a=1; Path=/", "b=\x01<>; HttpOnly"}, Body: []byte("ok")},
		"no type, html": {Status: 200, Body: []byte("<html><body>hi</body></html>")},
		"large escaped": {Status: 200, Body: []byte(strings.Repeat("\x02", 1<<16))},
		"large binary":  {Status: 200, Body: bytes.Repeat([]byte{0xff}, 1<<16)},
	}
	for name, resp := range answers {
		if bound, exact := sizeBound(resp), ResponseSize(resp); bound < exact {
			t.Errorf("%s: sizeBound = %d, below ResponseSize = %d", name, bound, exact)
		}
	}
	usual := answers["json"]
	if sizeBound(usual) > MaxResponse-ResponseHeadroom {
		t.Errorf("sizeBound(a payment's answer) = %d, want it under the limit, measured without encoding", sizeBound(usual))
	}
}

func BenchmarkDeliverable(b *testing.B) {
	for _, size := range []int{1 << 10, 5 << 20} {
		resp := idempotency.Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(itemsJSON(size) + `}`)}
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			for b.Loop() {
				_ = Deliverable(resp)
			}
		})
	}
}

// TestDeliverableFirstAnswer: the first answer is measured as it is sent,
// with the fields the store does not keep (a Date the handler set) and
// each spelling of a name set twice (X-Pad and x-pad), not only as its
// replay would be: an answer whose replay fits but whose first sending
// does not is refused before it is stored, on both stores. An
// Idempotent-Replayed the handler set is not sent (it is the Middleware's).
func TestDeliverableFirstAnswer(t *testing.T) {
	pad := strings.Repeat("<", 60<<10) // 6 bytes each in the proxy response's JSON
	body := []byte(`{"x":"` + strings.Repeat("a", 5_800_000) + `"}`)
	for storeName, newStore := range deliverStores(t) {
		for _, hdr := range []string{"two spellings", "Date", "Idempotent-Replayed"} {
			t.Run(storeName+"/"+hdr, func(t *testing.T) {
				store := newStore(t)
				raw := "first-answer-" + strings.ReplaceAll(hdr, " ", "-")
				ev, key := deliverEvent("REST API", raw), idempotency.NewKey("acme", raw)
				mw, err := idempotency.New(idempotency.Config{Store: store.Store, Tenant: func(*http.Request) (string, bool) { return "acme", true },
					Deliverable: Deliverable, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, ok := idempotency.Begin(w, r); !ok {
						return
					}
					w.Header().Set("Content-Type", "application/json")
					if hdr == "two spellings" {
						w.Header()["X-Pad"] = []string{pad}
						w.Header()["x-pad"] = []string{pad}
					} else {
						w.Header()[hdr] = []string{pad + pad}
					}
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write(body)
				})
				first := invokeRaw(t, mw.Wrap(idempotency.Leased, "POST /v1/payments", h), ev)
				if first.size > MaxResponse {
					t.Fatalf("first answer: %d, %d bytes, more than Lambda returns (%d)", first.status, first.size, MaxResponse)
				}
				rec, err := store.Get(t.Context(), key)
				if hdr == idempotency.ReplayedHeader {
					// The Middleware's own field: not sent on a first answer,
					// so the answer fits and is stored.
					if first.status != http.StatusCreated || err != nil || rec.Status != idempotency.StatusCompleted {
						t.Fatalf("first answer %d, record %s (%v); want 201 stored, without the handler's %s", first.status, rec.Status, err, hdr)
					}
					return
				}
				if first.status != http.StatusInternalServerError || !errors.Is(err, idempotency.ErrNotFound) {
					t.Fatalf("first answer %d, record %s (%v); want 500 response_too_large and no record (the Leased reservation released)", first.status, rec.Status, err)
				}
			})
		}
	}
}
