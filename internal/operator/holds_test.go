package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/refunds"
	"github.com/oncehq/once/internal/refunds/refundshttp"
)

// heldAmount is what the stale holds of these tests hold, of a payment of
// 2500.
const heldAmount = 700

// refundAPI is POST and GET /v1/refunds for tenant acme over e's tables,
// refunding at p.
func (e *env) refundAPI(t *testing.T, p refunds.Provider) http.Handler {
	t.Helper()
	tenant := func(*http.Request) (string, bool) { return "acme", true }
	mw, err := idempotency.New(idempotency.Config{Store: e.store, Tenant: tenant, OnError: httpapi.WriteError})
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.NewHandler(httpapi.Deps{
		Routes: refundshttp.Routes(mw, refundshttp.Config{Tables: e.refundTables(), DB: e.db, Provider: p}),
		Tenant: tenant, Logger: slog.New(slog.DiscardHandler),
	})
}

func (e *env) refundTables() refunds.Tables {
	return refunds.Tables{Refunds: e.names.ByLogicalID["RefundsTable"], Payments: e.names.ByLogicalID["PaymentsTable"]}
}

// refund POSTs body under the idempotency key raw to h and returns the
// status and problem code (or refund ID).
func refund(t *testing.T, h http.Handler, raw, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/refunds", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", raw)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var answer struct{ Code, ID string }
	_ = json.Unmarshal(w.Body.Bytes(), &answer)
	return w.Code, answer.Code + answer.ID
}

// lostAnswer is a provider whose every refund answer is lost: it refunds at
// the provider first when reach is set, and answers that the outcome is
// unknown either way.
type lostAnswer struct {
	refunds.Provider
	reach bool
}

func (l lostAnswer) Refund(ctx context.Context, key string, req provider.RefundRequest) (provider.Refund, error) {
	if l.reach {
		if _, err := l.Provider.Refund(ctx, key, req); err != nil {
			return provider.Refund{}, err
		}
	}
	return provider.Refund{}, fmt.Errorf("test: the answer was lost: %w", provider.ErrOutcomeUnknown)
}

// held is a succeeded payment of 2500 with a hold of heldAmount for the
// refund under key raw, and what made it.
type held struct {
	r    *retrier
	p    payments.Payment
	key  idempotency.Key
	raw  string
	body string
	rec  idempotency.Record
}

// holdUnknown charges a payment of 2500 at the simulator, settles it and
// sends a refund of heldAmount under raw whose answer is lost: its record is
// left UNKNOWN, holding heldAmount on the payment. With refunded, the
// provider did refund.
func (e *env) holdUnknown(t *testing.T, raw string, refunded bool) held {
	t.Helper()
	r := e.retrier(t)
	p := e.payment(t, "acme", "tok_visa", 0, 0)
	ch := r.charge(t, p)
	if err := r.table.Settle(t.Context(), "acme", p.ID, payments.StatusSucceeded, ch.ID, ""); err != nil {
		t.Fatal(err)
	}
	h := held{r: r, key: idempotency.NewKey("acme", raw), raw: raw,
		body: fmt.Sprintf(`{"payment":%q,"amount":%d}`, p.ID, heldAmount)}
	if code, pcode := refund(t, e.refundAPI(t, lostAnswer{r.provider, refunded}), raw, h.body); code != http.StatusGatewayTimeout {
		t.Fatalf("refund with its answer lost = %d %s, want 504", code, pcode)
	}
	var err error
	if h.rec, err = e.store.Get(t.Context(), h.key); err != nil || h.rec.Status != idempotency.StatusUnknown {
		t.Fatalf("record = %s, %v; want UNKNOWN", h.rec.Status, err)
	}
	h.p = e.paymentNow(t, p)
	if h.p.Holds[h.key.Hash] != heldAmount || h.p.Refundable != 2500-heldAmount {
		t.Fatalf("payment %+v: want a hold of %d", h.p, heldAmount)
	}
	return h
}

// staleHold is holdUnknown with the record forgotten by an operator: the
// hold is stale.
func (e *env) staleHold(t *testing.T, raw string, refunded bool) held {
	t.Helper()
	h := e.holdUnknown(t, raw, refunded)
	if code, _, errOut := e.run(t, "forget", "-confirm", h.rec.LeaseToken, h.key.ID()); code != 0 {
		t.Fatalf("forget = exit %d %q", code, errOut)
	}
	return h
}

// paymentNow reads p as it stands.
func (e *env) paymentNow(t *testing.T, p payments.Payment) payments.Payment {
	t.Helper()
	got, err := payments.NewTable(e.db, e.names.ByLogicalID["PaymentsTable"]).Get(t.Context(), p.Tenant, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// figures are a payment's refund figures.
type figures struct {
	Refundable, Refunded int64
	Holds                map[string]int64
}

func figuresOf(p payments.Payment) figures {
	return figures{Refundable: p.Refundable, Refunded: p.AmountRefunded, Holds: p.Holds}
}

// providerRefunds counts the refunds the provider made of p's charge.
func (h held) providerRefunds(t *testing.T) []provider.Refund {
	t.Helper()
	refs, _, err := h.r.provider.Refunds(t.Context(), h.p.ProviderChargeID)
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// settled is settle-hold's output.
type settled struct {
	KeyHash          string `json:"key_hash"`
	Record           string `json:"record"`
	Refund           string `json:"refund"`
	Amount           int64  `json:"amount"`
	RecordStatus     string `json:"record_status"`
	Stale            bool   `json:"stale"`
	NoRecord         bool   `json:"no_record"`
	Note             string `json:"note"`
	Payment          string `json:"payment"`
	Outcome          string `json:"outcome"`
	ProviderRefundID string `json:"provider_refund_id"`
	Settled          bool   `json:"settled"`
	ChangedMeanwhile bool   `json:"changed_meanwhile"`
	RecordUnreadable bool   `json:"record_unreadable"`
	RereadFailed     bool   `json:"reread_failed"`
	SettledUnknown   bool   `json:"settled_unknown"`
}

func decodeSettled(t *testing.T, out string) settled {
	t.Helper()
	var s settled
	if err := json.Unmarshal([]byte(out), &s); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("output %q: want one JSON object (%v)", out, err)
	}
	return s
}

// TestSettleHold: a refund's hold left stale by forget is shown stale, and
// settled as the operator found the provider: released (the provider did
// not refund) or refunded (it did, the refund item written). Before, every
// retry of its key answered 500; after, a retry runs again: the release's
// refunds afresh, the refunded's answers 422 idempotency_key_reused (its
// refund exists) rather than refunding again.
func TestSettleHold(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		outcome   string
		refunded  bool    // at the provider, by the lost request
		want      figures // after the settlement
		retry     int     // the retry's status
		retryCode string
		after     figures // after the retry
	}{
		{
			outcome: "release",
			want:    figures{Refundable: 2500, Holds: map[string]int64{}},
			retry:   http.StatusCreated, after: figures{Refundable: 2500 - heldAmount, Refunded: heldAmount, Holds: map[string]int64{}},
		},
		{
			outcome: "refunded", refunded: true,
			want:  figures{Refundable: 2500 - heldAmount, Refunded: heldAmount, Holds: map[string]int64{}},
			retry: http.StatusUnprocessableEntity, retryCode: "idempotency_key_reused",
			after: figures{Refundable: 2500 - heldAmount, Refunded: heldAmount, Holds: map[string]int64{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			raw := "refund-" + tt.outcome
			h := e.staleHold(t, raw, tt.refunded)
			api := e.refundAPI(t, h.r.provider)
			// The stuck key: every retry answers 500, writing nothing.
			if code, pcode := refund(t, api, raw, h.body); code != http.StatusInternalServerError {
				t.Fatalf("retry of the stale hold's key = %d %s, want 500", code, pcode)
			}

			code, out, errOut := e.run(t, "holds", h.p.PK)
			if code != 0 {
				t.Fatalf("holds = exit %d %q", code, errOut)
			}
			var shown struct {
				Payment    string `json:"payment"`
				Refundable int64  `json:"refundable"`
				Holds      []settled
			}
			if err := json.Unmarshal([]byte(out), &shown); err != nil {
				t.Fatal(err)
			}
			// Forgotten, the key has no record: the hold is settled with
			// -no-record.
			wantHold := settled{KeyHash: h.key.Hash, Record: h.key.ID(), Refund: refunds.ID(h.key), Amount: heldAmount, NoRecord: true}
			if diff := cmp.Diff([]settled{wantHold}, shown.Holds, cmpopts.IgnoreFields(settled{}, "Note")); diff != "" ||
				shown.Refundable != 2500-heldAmount || !strings.Contains(errOut, "1 with no record") || !strings.Contains(shown.Holds[0].Note, "forgotten") {
				t.Errorf("holds: refundable %d, %q, holds (-want +got):\n%s", shown.Refundable, errOut, diff)
			}

			var extra []string
			var providerRefund string
			if tt.refunded {
				refs := h.providerRefunds(t)
				if len(refs) != 1 {
					t.Fatalf("provider refunds = %d, want the lost request's", len(refs))
				}
				providerRefund = refs[0].ID
				extra = []string{"-provider-refund", providerRefund}
			}
			args := append([]string{"settle-hold", tt.outcome, "-no-record", "-hold", h.key.Hash}, extra...)
			code, out, errOut = e.run(t, append(args, h.p.PK)...)
			if code != 1 || !strings.Contains(errOut, fmt.Sprintf("-confirm %d", heldAmount)) {
				t.Errorf("settle-hold without -confirm = exit %d %q, want 1 asking for -confirm with the amount", code, errOut)
			}
			if got := decodeSettled(t, out); got.Settled || got.Amount != heldAmount || !got.NoRecord {
				t.Errorf("settle-hold without -confirm printed %+v, want the hold with no record, not settled", got)
			}
			if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, figuresOf(h.p)) {
				t.Errorf("payment after settle-hold without -confirm = %+v, want it unchanged", got)
			}

			code, out, errOut = e.run(t, append(args, "-confirm", fmt.Sprint(heldAmount), "-tenant", "acme", "-payment", h.p.ID)...)
			if code != 0 {
				t.Fatalf("settle-hold -confirm = exit %d %q", code, errOut)
			}
			if got := decodeSettled(t, out); !got.Settled || got.Outcome != tt.outcome || got.ProviderRefundID != providerRefund {
				t.Errorf("settle-hold -confirm printed %+v, want it settled %s", got, tt.outcome)
			}
			var log struct {
				Level, Msg, Payment, Outcome string
				KeyHash                      string `json:"key_hash"`
				Amount                       int64
			}
			if err := json.Unmarshal([]byte(errOut), &log); err != nil || log.Level != "INFO" || log.Payment != h.p.PK ||
				log.KeyHash != h.key.Hash || log.Amount != heldAmount || log.Outcome != tt.outcome {
				t.Errorf("stderr %q (%v), want one JSON log line naming the payment, hold and outcome", errOut, err)
			}
			if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, tt.want) {
				t.Errorf("payment after settle-hold %s = %+v, want %+v", tt.outcome, got, tt.want)
			}
			if tt.refunded {
				r := httptest.NewRequest("GET", refunds.Location(refunds.ID(h.key)), nil)
				w := httptest.NewRecorder()
				api.ServeHTTP(w, r)
				var got struct {
					Amount           int64  `json:"amount"`
					Payment          string `json:"payment"`
					Currency         string `json:"currency"`
					ProviderRefundID string `json:"provider_refund_id"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || got.Amount != heldAmount ||
					got.Payment != h.p.ID || got.Currency != "eur" || got.ProviderRefundID != providerRefund {
					t.Errorf("GET the refund = %d %s, want the refund settled", w.Code, w.Body)
				}
			}

			// The key runs again.
			if code, pcode := refund(t, api, raw, h.body); code != tt.retry || tt.retryCode != "" && pcode != tt.retryCode {
				t.Errorf("retry after settle-hold %s = %d %s, want %d %s", tt.outcome, code, pcode, tt.retry, tt.retryCode)
			}
			if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, tt.after) {
				t.Errorf("payment after the retry = %+v, want %+v", got, tt.after)
			}
			if n := len(h.providerRefunds(t)); n != 1 {
				t.Errorf("provider refunds of the charge = %d, want 1", n)
			}
			if code, out, errOut := e.run(t, "holds", h.p.PK); code != 0 || strings.Contains(out+errOut, raw) {
				t.Errorf("holds = exit %d, output %s%s: want it, never the raw key", code, out, errOut)
			}
		})
	}
}

// TestSettleHoldRefuses: settle-hold writes nothing but a stale hold, the
// amount -confirm names, of a payment and key that exist.
func TestSettleHoldRefuses(t *testing.T) {
	e := newEnv(t)
	stale := e.staleHold(t, "refund-stale", false)
	live := e.holdUnknown(t, "refund-live", false)
	none := strings.Repeat("0", 64)
	tests := []struct {
		name string
		h    held
		args []string
		code int
		want string // in the error
	}{
		{"live record", live, []string{"release", "-confirm", "700", "-hold", live.key.Hash, live.p.PK}, 1, "not stale: its key has a live record, UNKNOWN"},
		{"live record, -no-record", live, []string{"release", "-no-record", "-confirm", "700", "-hold", live.key.Hash, live.p.PK}, 1, "not stale: its key has a live record, UNKNOWN"},
		{"no record, without -no-record", stale, []string{"release", "-confirm", "700", "-hold", stale.key.Hash, stale.p.PK}, 1, "its key has no record"},
		{"wrong -confirm", stale, []string{"release", "-no-record", "-confirm", "699", "-hold", stale.key.Hash, stale.p.PK}, 1, "it is 700 now, not 699"},
		{"unknown key", stale, []string{"release", "-confirm", "700", "-hold", none, stale.p.PK}, 1, "holds nothing for key hash " + none},
		{"unknown payment", stale, []string{"release", "-confirm", "700", "-hold", stale.key.Hash, "acme#" + payments.NewID()}, 1, "no payment"},
		{"other tenant", stale, []string{"release", "-confirm", "700", "-hold", stale.key.Hash, "globex#" + stale.p.ID}, 1, "no payment"},
		{"no outcome", stale, []string{"-hold", stale.key.Hash, stale.p.PK}, 2, "not an outcome: want release or refunded"},
		{"unknown outcome", stale, []string{"forget", "-hold", stale.key.Hash, stale.p.PK}, 2, "not an outcome"},
		{"refunded without its provider refund", stale, []string{"refunded", "-confirm", "700", "-hold", stale.key.Hash, stale.p.PK}, 2, "-provider-refund"},
		{"release with a provider refund", stale, []string{"release", "-provider-refund", "re_1", "-hold", stale.key.Hash, stale.p.PK}, 2, "no -provider-refund"},
		{"no hold", stale, []string{"release", "-confirm", "700", stale.p.PK}, 2, "-hold"},
		{"a raw key for a hold", stale, []string{"release", "-hold", "refund-stale", stale.p.PK}, 2, "-hold"},
		{"no payment", stale, []string{"release", "-hold", stale.key.Hash}, 2, "give a payment"},
		{"a bad payment", stale, []string{"release", "-hold", stale.key.Hash, "pay_x"}, 2, "not a payment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := e.run(t, append([]string{"settle-hold"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("settle-hold %v = exit %d %q, want %d saying %q", tt.args, code, errOut, tt.code, tt.want)
			}
			if got := figuresOf(e.paymentNow(t, tt.h.p)); !cmp.Equal(got, figuresOf(tt.h.p)) {
				t.Errorf("payment after = %+v, want it unchanged, %+v", got, figuresOf(tt.h.p))
			}
		})
	}
	t.Run("holds shows the live one live", func(t *testing.T) {
		code, out, _ := e.run(t, "holds", "-tenant", "acme", "-payment", live.p.ID)
		var shown struct{ Holds []settled }
		if err := json.Unmarshal([]byte(out), &shown); err != nil || code != 0 || len(shown.Holds) != 1 ||
			shown.Holds[0].Stale || shown.Holds[0].RecordStatus != "UNKNOWN" {
			t.Errorf("holds = exit %d %s (%v), want the hold, not stale, its record UNKNOWN", code, out, err)
		}
	})
	for _, args := range [][]string{{"holds"}, {"holds", "pay_x"}, {"holds", "-tenant", "acme"}} {
		if code, _, _ := e.run(t, args...); code != 2 {
			t.Errorf("oncectl %v = exit %d, want 2", args, code)
		}
	}
}

// TestSettleHoldFenced: what changes between settle-hold's read and its
// write leaves the hold as it is, and the command says what it is now: the
// hold settled or changed meanwhile (its Update's condition), a record of
// its key restored meanwhile, as the sweeper restores an UNKNOWN record
// that TTL deleted, or any record the store's reclaim rule says a new
// request may not reclaim: an External reservation, expired or not, an
// expired UNKNOWN record, a COMPLETED record within its retention (its
// ConditionCheck), and a refund of the key written meanwhile (the refund's
// Put). What it prints is the hold as it is when the write is refused,
// marked changed meanwhile, not as it was read before.
func TestSettleHoldFenced(t *testing.T) {
	e := newEnv(t)
	paymentsTable := e.names.ByLogicalID["PaymentsTable"]
	setHold := func(t *testing.T, h held, update string, values map[string]dynamodbtypes.AttributeValue) {
		t.Helper()
		if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName: aws.String(paymentsTable), Key: map[string]dynamodbtypes.AttributeValue{payments.KeyAttr: &dynamodbtypes.AttributeValueMemberS{Value: h.p.PK}},
			UpdateExpression: aws.String(update), ExpressionAttributeNames: map[string]string{"#holds": payments.AttrHolds, "#key": h.key.Hash},
			ExpressionAttributeValues: values,
		}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		outcome string
		change  func(t *testing.T, h held)
		want    string
		// shown: the hold's amount (0: gone) and its key's record's
		// status ("": none) printed, as they are after the change.
		amount int64
		status idempotency.Status
	}{
		{"hold changed meanwhile", "release", func(t *testing.T, h held) {
			setHold(t, h, "SET #holds.#key = :a", map[string]dynamodbtypes.AttributeValue{":a": &dynamodbtypes.AttributeValueMemberN{Value: "500"}})
		}, "it changed meanwhile, to 500 (not 700)", 500, ""},
		{"hold settled meanwhile", "refunded", func(t *testing.T, h held) {
			setHold(t, h, "REMOVE #holds.#key", nil)
		}, "it is gone: settled meanwhile", 0, ""},
		{"record restored meanwhile", "release", func(t *testing.T, h held) {
			// As the sweeper restores an UNKNOWN record that TTL deleted.
			if err := e.store.Reserve(t.Context(), h.rec, nil, time.Now()); err != nil {
				t.Fatal(err)
			}
		}, "its key has a live record now, UNKNOWN", heldAmount, idempotency.StatusUnknown},
		// The store's reclaim rule: a record of the key that a new request
		// may not reclaim holds the hold, however it got there meanwhile.
		{"live External reservation meanwhile", "refunded", func(t *testing.T, h held) {
			e.put(t, recordAs(h.rec, idempotency.StatusInProgress, time.Hour))
		}, "its key has a live record now, IN_PROGRESS", heldAmount, idempotency.StatusInProgress},
		{"expired External reservation meanwhile", "release", func(t *testing.T, h held) {
			e.put(t, recordAs(h.rec, idempotency.StatusInProgress, -time.Minute))
		}, "its key has a live record now, IN_PROGRESS", heldAmount, idempotency.StatusInProgress},
		{"expired UNKNOWN record meanwhile", "release", func(t *testing.T, h held) {
			e.put(t, recordAs(h.rec, idempotency.StatusUnknown, -time.Minute))
		}, "its key has a live record now, UNKNOWN", heldAmount, idempotency.StatusUnknown},
		{"COMPLETED record within its retention meanwhile", "refunded", func(t *testing.T, h held) {
			e.put(t, recordAs(h.rec, idempotency.StatusCompleted, time.Hour))
		}, "its key has a live record now, COMPLETED", heldAmount, idempotency.StatusCompleted},
		{"refund written meanwhile", "refunded", func(t *testing.T, h held) {
			item, err := attributevalue.MarshalMap(refunds.Refund{PK: refunds.PK("acme", refunds.ID(h.key)), ID: refunds.ID(h.key), Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(e.names.ByLogicalID["RefundsTable"]), Item: item}); err != nil {
				t.Fatal(err)
			}
		}, "refund " + "re_", heldAmount, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := e.staleHold(t, fmt.Sprintf("refund-race-%d", i), false)
			db := &settling{Client: e.db, change: func() { tt.change(t, h) }}
			cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			before := figuresOf(e.paymentNow(t, h.p))
			args := []string{"settle-hold", tt.outcome, "-no-record", "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK}
			if tt.outcome == "refunded" {
				args = append(args, "-provider-refund", "prre_1")
			}
			var out, errOut bytes.Buffer
			code := operator.New(cfg, db, e.sqs, &out, &errOut).Run(t.Context(), args)
			if code != 1 || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("settle-hold = exit %d %q, want 1 saying %q", code, errOut.String(), tt.want)
			}
			got := decodeSettled(t, out.String())
			if got.Settled || !got.ChangedMeanwhile || got.Amount != tt.amount || got.RecordStatus != string(tt.status) || got.NoRecord != (tt.status == "") {
				t.Errorf("printed %+v, want not settled, changed meanwhile, the hold of %d as it is now, its record %q", got, tt.amount, tt.status)
			}
			if tt.amount == 0 && !strings.Contains(got.Note, "holds nothing for the key now") {
				t.Errorf("printed note %q, want it to say the payment holds nothing for the key now", got.Note)
			}
			if !strings.HasPrefix(got.Note, "read again after the write was refused") {
				t.Errorf("printed note %q, want it to say the hold shown was read again after the refused write", got.Note)
			}
			if db.transactions != 1 {
				t.Errorf("TransactWriteItems calls = %d, want 1 (fenced, not retried)", db.transactions)
			}
			// Nothing of the transaction is written: the payment is as
			// the change left it.
			after := figuresOf(e.paymentNow(t, h.p))
			if after.Refundable != before.Refundable || after.Refunded != before.Refunded {
				t.Errorf("payment after = %+v, want refundable %d and refunded %d as before", after, before.Refundable, before.Refunded)
			}
			if tt.outcome == "refunded" && !strings.HasPrefix(tt.name, "refund written") {
				out, err := e.db.GetItem(t.Context(), &dynamodb.GetItemInput{
					TableName: aws.String(e.names.ByLogicalID["RefundsTable"]), ConsistentRead: aws.Bool(true),
					Key: map[string]dynamodbtypes.AttributeValue{refunds.KeyAttr: &dynamodbtypes.AttributeValueMemberS{Value: refunds.PK("acme", refunds.ID(h.key))}},
				})
				if err != nil || len(out.Item) != 0 {
					t.Errorf("refund item after = %v (%v), want none", out.Item, err)
				}
			}
		})
	}
}

// recordAs is rec, an External refund's record, in status, expiring in
// expires from now; COMPLETED, with the answer of a refund whose effects
// were dropped (response_too_large).
func recordAs(rec idempotency.Record, status idempotency.Status, expires time.Duration) idempotency.Record {
	rec.Status, rec.ExpiresAt = status, time.Now().Add(expires)
	if status == idempotency.StatusCompleted {
		rec.LeaseToken = ""
		rec.Response = &idempotency.Response{Status: 500, Header: map[string]string{"Content-Type": "application/problem+json"},
			Body: []byte(`{"code":"response_too_large"}`)}
	}
	return rec
}

// settling is a DynamoDB client that runs change once before the first
// TransactWriteItems: something changing between settle-hold's read and
// its write.
type settling struct {
	*dynamodb.Client
	change       func()
	transactions int
}

func (c *settling) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if c.transactions == 0 {
		c.change()
	}
	c.transactions++
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

// TestSettleHoldRecordStates: a hold is stale when no record holds its key:
// none, or one a new request may reclaim, as an expired COMPLETED record
// whose answer was stored without the effects giving the hold back
// (response_too_large) before TTL deletes it. An UNKNOWN record or an
// External reservation, expired or not, and a COMPLETED record within its
// retention hold the key: settle-hold refuses their holds.
func TestSettleHoldRecordStates(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	tests := []struct {
		name    string
		status  idempotency.Status
		expires time.Duration // from now
		stale   bool
	}{
		{"COMPLETED, expired", idempotency.StatusCompleted, -time.Minute, true},
		{"COMPLETED, within its retention", idempotency.StatusCompleted, time.Hour, false},
		{"UNKNOWN, expired", idempotency.StatusUnknown, -time.Minute, false},
		{"External reservation, expired", idempotency.StatusInProgress, -time.Minute, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := e.holdUnknown(t, fmt.Sprintf("refund-state-%d", i), false)
			rec := h.rec
			rec.Status, rec.ExpiresAt = tt.status, now.Add(tt.expires)
			if tt.status == idempotency.StatusCompleted {
				rec.LeaseToken = ""
				rec.Response = &idempotency.Response{Status: 500, Header: map[string]string{"Content-Type": "application/problem+json"},
					Body: []byte(`{"code":"response_too_large"}`)}
			}
			e.put(t, rec)

			code, out, errOut := e.run(t, "holds", h.p.PK)
			var shown struct{ Holds []settled }
			if err := json.Unmarshal([]byte(out), &shown); err != nil || code != 0 || len(shown.Holds) != 1 ||
				shown.Holds[0].Stale != tt.stale || shown.Holds[0].RecordStatus != string(tt.status) {
				t.Errorf("holds = exit %d %s %s (%v), want the hold, stale %v, its record %s", code, out, errOut, err, tt.stale, tt.status)
			}
			code, _, errOut = e.run(t, "settle-hold", "release", "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK)
			want := figuresOf(h.p)
			if tt.stale {
				want = figures{Refundable: 2500, Holds: map[string]int64{}}
				if code != 0 {
					t.Errorf("settle-hold = exit %d %q, want it settled", code, errOut)
				}
			} else if code != 1 || !strings.Contains(errOut, "not stale: its key has a live record, "+string(tt.status)) {
				t.Errorf("settle-hold = exit %d %q, want 1 saying its key has a live record", code, errOut)
			}
			if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, want) {
				t.Errorf("payment after = %+v, want %+v", got, want)
			}
		})
	}
}

// TestSettleHoldNoRecord: a hold whose key has no record is not stale for
// that alone: its UNKNOWN record may have been deleted by TTL, and the
// sweeper restores it later (after stream lag, or a day while it fails).
// settle-hold refuses it without -no-record, which an operator passes only
// once the record was forgotten or the sweeper has processed the deletion;
// settled in that gap, a restored record would find its hold gone: refunded
// would leave it unresolvable for good, release would give back an amount
// the provider refunded, refundable again under another key.
func TestSettleHoldNoRecord(t *testing.T) {
	e := newEnv(t)
	h := e.holdUnknown(t, "refund-ttl", true)
	refs := h.providerRefunds(t)
	if len(refs) != 1 {
		t.Fatalf("provider refunds = %d, want the lost request's", len(refs))
	}
	// TTL deletes the UNKNOWN record; the sweeper has not restored it yet.
	if _, err := e.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.ByLogicalID["IdempotencyTable"]),
		Key:       map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: h.key.ID()}},
	}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := e.run(t, "holds", h.p.PK)
	var shown struct{ Holds []settled }
	if err := json.Unmarshal([]byte(out), &shown); err != nil || code != 0 || len(shown.Holds) != 1 {
		t.Fatalf("holds = exit %d %s %s (%v), want the hold", code, out, errOut, err)
	}
	if got := shown.Holds[0]; got.Stale || !got.NoRecord || !strings.Contains(got.Note, "deleted by TTL") ||
		!strings.Contains(got.Note, "oncectl forget") || !strings.Contains(got.Note, "-no-record") {
		t.Errorf("holds shows %+v, want no record, not stale, saying it may be deleted by TTL and not yet restored, and -no-record", got)
	}
	if !strings.Contains(errOut, "1 with no record") {
		t.Errorf("holds stderr %q, want it to count the hold with no record", errOut)
	}

	for _, outcome := range [][]string{{"release"}, {"refunded", "-provider-refund", refs[0].ID}} {
		args := append(append([]string{"settle-hold"}, outcome...), "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK)
		code, out, errOut := e.run(t, args...)
		if code != 1 || !strings.Contains(errOut, "no record") || !strings.Contains(errOut, "-no-record") {
			t.Errorf("settle-hold %s without -no-record = exit %d %q, want 1 saying the key has no record, and -no-record", outcome[0], code, errOut)
		}
		if got := decodeSettled(t, out); got.Settled || !got.NoRecord {
			t.Errorf("settle-hold %s printed %+v, want the hold with no record, not settled", outcome[0], got)
		}
		if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, figuresOf(h.p)) {
			t.Errorf("payment after settle-hold %s without -no-record = %+v, want it unchanged", outcome[0], got)
		}
	}

	// The sweeper restores the record, UNKNOWN, owning its hold still: the
	// reconciler settles it. Not the operator: the key has a live record.
	if err := e.store.Reserve(t.Context(), h.rec, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = e.run(t, "settle-hold", "release", "-no-record", "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK)
	if code != 1 || !strings.Contains(errOut, "not stale: its key has a live record, UNKNOWN") {
		t.Errorf("settle-hold -no-record of a restored record = exit %d %q, want 1 saying it is live", code, errOut)
	}

	// Once the operator forgets it, -no-record settles the hold.
	code, out, errOut = e.run(t, "forget", h.key.ID())
	if code != 1 || !strings.Contains(out, "-no-record -hold "+h.key.Hash) || !strings.Contains(out, h.p.PK) {
		t.Errorf("forget of a refund's record = exit %d %s %q, want it to name settle-hold -no-record for its hold on %s", code, out, errOut, h.p.PK)
	}
	if code, _, errOut := e.run(t, "forget", "-confirm", h.rec.LeaseToken, h.key.ID()); code != 0 {
		t.Fatalf("forget = exit %d %q", code, errOut)
	}
	args := []string{"settle-hold", "refunded", "-provider-refund", refs[0].ID, "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK}
	if code, _, errOut := e.run(t, args...); code != 1 || !strings.Contains(errOut, "-no-record") {
		t.Errorf("settle-hold after forget without -no-record = exit %d %q, want 1 asking for -no-record", code, errOut)
	}
	code, out, errOut = e.run(t, append(args, "-no-record")...)
	if code != 0 {
		t.Fatalf("settle-hold -no-record after forget = exit %d %q", code, errOut)
	}
	if got := decodeSettled(t, out); !got.Settled || !got.NoRecord {
		t.Errorf("settle-hold -no-record printed %+v, want it settled", got)
	}
	want := figures{Refundable: 2500 - heldAmount, Refunded: heldAmount, Holds: map[string]int64{}}
	if got := figuresOf(e.paymentNow(t, h.p)); !cmp.Equal(got, want) {
		t.Errorf("payment after = %+v, want %+v", got, want)
	}
}

// TestHoldsUnreadableRecord: oncectl holds PAYMENT shows a hold whose key's
// record cannot be decoded as such (record_unreadable, the error in its
// note, counted on stderr), beside the others, whether it reads the
// payment's holds as one snapshot (99 holds and fewer) or apart (more): it
// neither fails the listing nor leaves the hold out.
func TestHoldsUnreadableRecord(t *testing.T) {
	type shown struct {
		KeyHash          string `json:"key_hash"`
		RecordStatus     string `json:"record_status"`
		Stale            bool   `json:"stale"`
		NoRecord         bool   `json:"no_record"`
		RecordUnreadable bool   `json:"record_unreadable"`
		Note             string `json:"note"`
	}
	for _, n := range []int{1, 99, 100} {
		t.Run(fmt.Sprintf("%d holds", n), func(t *testing.T) {
			e := newEnv(t)
			var many []heldBy
			for i := range n {
				many = append(many, heldBy{pay: "p", tenant: "acme", raw: fmt.Sprintf("h%03d", i), amount: 10, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour})
			}
			made := e.makeHolds(t, many)
			bad := made["h000"]
			// An expiry that is not a number: dynamo.RecordFromItem fails.
			if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
				TableName:                 aws.String(e.names.ByLogicalID["IdempotencyTable"]),
				Key:                       map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: bad.key.ID()}},
				UpdateExpression:          aws.String("SET #e = :e"),
				ExpressionAttributeNames:  map[string]string{"#e": dynamo.AttrExpiresAtMS},
				ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":e": &dynamodbtypes.AttributeValueMemberS{Value: "soon"}},
			}); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := e.run(t, "holds", bad.p.PK)
			if code != 0 {
				t.Fatalf("holds = exit %d %q, want the listing", code, errOut)
			}
			var got struct{ Holds []shown }
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Holds) != n {
				t.Fatalf("holds shows %d holds, want %d", len(got.Holds), n)
			}
			for _, h := range got.Holds {
				if h.KeyHash != bad.key.Hash {
					if h.RecordUnreadable || h.RecordStatus != string(idempotency.StatusUnknown) {
						t.Errorf("holds shows %+v, want its UNKNOWN record", h)
					}
					continue
				}
				if !h.RecordUnreadable || h.RecordStatus != "" || h.Stale || h.NoRecord ||
					!strings.Contains(h.Note, "cannot be read") || !strings.Contains(h.Note, dynamo.AttrExpiresAtMS) {
					t.Errorf("holds shows the hold of the undecodable record as %+v, want record_unreadable, neither stale nor no record, its note naming %s", h, dynamo.AttrExpiresAtMS)
				}
			}
			if !strings.Contains(errOut, "1 whose record cannot be read") {
				t.Errorf("holds stderr %q, want it to count the hold whose record cannot be read", errOut)
			}
			// The note names a command that reads the item as it is:
			// `oncectl show` decodes it, and fails as holds would have.
			getItem := fmt.Sprintf(`aws dynamodb get-item --table-name %s --key '{"pk":{"S":"%s"}}'`, e.names.ByLogicalID["IdempotencyTable"], bad.key.ID())
			for _, h := range got.Holds {
				if h.KeyHash == bad.key.Hash && (!strings.Contains(h.Note, getItem) || strings.Contains(h.Note, "oncectl show")) {
					t.Errorf("holds note %q, want it to name %s, not oncectl show", h.Note, getItem)
				}
			}

			// holds -stale reads the record as holds does: the line is
			// there with -all, not stale, its next step to look at the
			// item; without -all it is counted on stderr.
			lines, _ := e.staleHolds(t, "-all", "-limit", "1000")
			if len(lines) != n {
				t.Fatalf("holds -stale -all lists %d holds, want %d", len(lines), n)
			}
			for _, l := range lines {
				if l.KeyHash != bad.key.Hash {
					if l.RecordUnreadable || l.RecordStatus != string(idempotency.StatusUnknown) {
						t.Errorf("holds -stale -all lists %+v, want its UNKNOWN record", l)
					}
					continue
				}
				if !l.RecordUnreadable || l.Stale || l.NoRecord || l.RecordStatus != "" || l.Next != "inspect" || l.Command != getItem ||
					!strings.Contains(l.Note, dynamo.AttrExpiresAtMS) {
					t.Errorf("holds -stale -all lists the hold of the undecodable record as %+v, want record_unreadable, not stale, next inspect: %s", l, getItem)
				}
			}
			code, out, errOut = e.run(t, "holds", "-stale", "-all", "-limit", "1000")
			if row := regexp.MustCompile(bad.key.Hash + `.*\n`).FindString(out); code != 0 ||
				!regexp.MustCompile(`^\S+\s+10 eur\s+unreadable\s+-\s+no\s+inspect\n$`).MatchString(row) {
				t.Errorf("holds -stale -all = exit %d %q, its row %q: want unreadable, no age, not stale, next inspect", code, errOut, row)
			}
			code, out, errOut = e.run(t, "holds", "-stale")
			if code != 0 || strings.Contains(out, bad.key.Hash) || !strings.Contains(errOut, "1 hold(s) whose record cannot be read") {
				t.Errorf("holds -stale = exit %d %q %q, want it, the hold not listed but counted on stderr as one whose record cannot be read", code, out, errOut)
			}
			// settle-hold cannot tell whether it is stale: it refuses it.
			code, _, errOut = e.run(t, "settle-hold", "release", "-no-record", "-confirm", "10", "-hold", bad.key.Hash, bad.p.PK)
			if code != 1 || !strings.Contains(errOut, "cannot be read") {
				t.Errorf("settle-hold of the hold of the undecodable record = exit %d %q, want 1 saying its record cannot be read", code, errOut)
			}
			if got := figuresOf(e.paymentNow(t, bad.p)); !cmp.Equal(got, figuresOf(bad.p)) {
				t.Errorf("payment after = %+v, want it unchanged, %+v", got, figuresOf(bad.p))
			}
		})
	}
}

// TestSettleHoldReadsOnce: settle-hold reads the payment and its hold's
// record as one snapshot, so what it refuses with is what is true then: a
// hold released or completed just as it reads (between a read of the
// payment and one of the record, when they were read apart) is refused as
// a hold the payment no longer has, not as a hold whose key has no record
// (released) or a live record (completed).
func TestSettleHoldReadsOnce(t *testing.T) {
	tests := []struct {
		name  string
		other func(t *testing.T, e *env, s stored)
	}{
		{"released", releaseHold},
		{"completed", completeHold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			h := heldBy{pay: "p", tenant: "acme", raw: "racing", amount: heldAmount, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour}
			s := e.makeHolds(t, []heldBy{h})[h.raw]
			code, _, errOut := e.runMeanwhile(t, &meanwhile{fn: func() { tt.other(t, e, s) }},
				"settle-hold", "release", "-confirm", fmt.Sprint(heldAmount), "-hold", s.key.Hash, s.p.PK)
			if code != 1 || !strings.Contains(errOut, "holds nothing for key hash "+s.key.Hash) {
				t.Errorf("settle-hold = exit %d %q, want 1 saying the payment holds nothing for the key (now)", code, errOut)
			}
		})
	}
}

// failing is a DynamoDB client whose TransactWriteItems runs change first,
// then answers write (the real call when nil); with rereadFails, every
// TransactGetItems after the write fails.
type failing struct {
	*dynamodb.Client
	change      func()
	write       func() error
	rereadFails bool
	written     bool
}

func (c *failing) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.written = true
	if c.change != nil {
		c.change()
	}
	if c.write != nil {
		return nil, c.write()
	}
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

func (c *failing) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	if c.written && c.rereadFails {
		return nil, errors.New("test: the re-read failed")
	}
	return c.Client.TransactGetItems(ctx, in, opts...)
}

// TestSettleHoldWriteFails: what settle-hold prints when its write fails
// otherwise than by a failed condition. A transaction cancelled only
// because another was in flight wrote nothing: it is a refusal, the hold
// read again and marked changed_meanwhile (the view read before would show
// a hold settled meanwhile). An error that is not a cancellation (a
// timeout: DynamoDB may have written it) makes no claim that it was not
// settled. A refusal whose re-read fails shows the view read before the
// write, marked reread_failed, not an amount 0 that says it is gone. A
// refusal whose re-read finds the hold gone and its record unreadable says
// both.
func TestSettleHoldWriteFails(t *testing.T) {
	e := newEnv(t)
	removeHold := func(t *testing.T, h held) {
		t.Helper()
		if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                aws.String(e.names.ByLogicalID["PaymentsTable"]),
			Key:                      map[string]dynamodbtypes.AttributeValue{payments.KeyAttr: &dynamodbtypes.AttributeValueMemberS{Value: h.p.PK}},
			UpdateExpression:         aws.String("REMOVE #holds.#key"),
			ExpressionAttributeNames: map[string]string{"#holds": payments.AttrHolds, "#key": h.key.Hash},
		}); err != nil {
			t.Fatal(err)
		}
	}
	conflict := func() error {
		return &dynamodbtypes.TransactionCanceledException{Message: aws.String("test: conflict"), CancellationReasons: []dynamodbtypes.CancellationReason{
			{Code: aws.String("TransactionConflict")}, {Code: aws.String("None")},
		}}
	}
	tests := []struct {
		name        string
		change      func(t *testing.T, h held)
		write       func() error
		rereadFails bool
		want        []string // in the error
		check       func(t *testing.T, h held, got settled, raw map[string]any)
	}{
		{"cancelled by a transaction in flight", removeHold, conflict, false,
			[]string{"another write was in flight", "TransactionConflict", "oncectl holds"},
			func(t *testing.T, h held, got settled, raw map[string]any) {
				if got.Settled || !got.ChangedMeanwhile || got.Amount != 0 || got.RereadFailed || !strings.Contains(got.Note, "holds nothing for the key now") {
					t.Errorf("printed %+v, want not settled, changed meanwhile, the hold gone (amount 0) as read again", got)
				}
			}},
		{"not a cancellation", nil, func() error { return errors.New("test: timed out after the request was sent") }, false,
			[]string{"timed out", "whether it was written is unknown", "oncectl holds " + ""},
			func(t *testing.T, h held, got settled, raw map[string]any) {
				if _, ok := raw["settled"]; ok || !got.SettledUnknown || got.ChangedMeanwhile || got.Amount != heldAmount {
					t.Errorf("printed %v, want no settled, settled_unknown, the hold as read", raw)
				}
			}},
		{"refused, the re-read fails", removeHold, nil, true,
			[]string{"it is gone: settled meanwhile"},
			func(t *testing.T, h held, got settled, raw map[string]any) {
				if got.Settled || !got.ChangedMeanwhile || !got.RereadFailed || got.Amount != heldAmount || !got.NoRecord ||
					!strings.Contains(got.Note, "could not be read again") || !strings.Contains(got.Note, "test: the re-read failed") {
					t.Errorf("printed %+v, want not settled, changed meanwhile, reread_failed, the hold as read before the write, its note saying the re-read failed", got)
				}
			}},
		{"refused, the hold gone and its record unreadable", func(t *testing.T, h held) {
			removeHold(t, h)
			e.put(t, recordAs(h.rec, idempotency.StatusUnknown, time.Hour))
			if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
				TableName:                 aws.String(e.names.ByLogicalID["IdempotencyTable"]),
				Key:                       map[string]dynamodbtypes.AttributeValue{dynamo.AttrPK: &dynamodbtypes.AttributeValueMemberS{Value: h.key.ID()}},
				UpdateExpression:          aws.String("SET #e = :e"),
				ExpressionAttributeNames:  map[string]string{"#e": dynamo.AttrExpiresAtMS},
				ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":e": &dynamodbtypes.AttributeValueMemberS{Value: "soon"}},
			}); err != nil {
				t.Fatal(err)
			}
		}, nil, false,
			[]string{"it is gone: settled meanwhile"},
			func(t *testing.T, h held, got settled, raw map[string]any) {
				if got.Settled || !got.ChangedMeanwhile || got.Amount != 0 || !got.RecordUnreadable || got.Stale || got.RereadFailed ||
					!strings.Contains(got.Note, "holds nothing for the key now") || !strings.Contains(got.Note, "cannot be read") {
					t.Errorf("printed %+v, want the hold gone, its record unreadable, the note saying both", got)
				}
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := e.staleHold(t, fmt.Sprintf("refund-fails-%d", i), false)
			db := &failing{Client: e.db, write: tt.write, rereadFails: tt.rereadFails}
			if tt.change != nil {
				db.change = func() { tt.change(t, h) }
			}
			cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			code := operator.New(cfg, db, e.sqs, &out, &errOut).Run(t.Context(),
				[]string{"settle-hold", "release", "-no-record", "-confirm", fmt.Sprint(heldAmount), "-hold", h.key.Hash, h.p.PK})
			if code != 1 {
				t.Errorf("settle-hold = exit %d %q, want 1", code, errOut.String())
			}
			for _, want := range tt.want {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("settle-hold stderr %q, want it to say %q", errOut.String(), want)
				}
			}
			var raw map[string]any
			if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			tt.check(t, h, decodeSettled(t, out.String()), raw)
		})
	}
}
