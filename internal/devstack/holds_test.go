package devstack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// oncectl runs the operator's tool against stack, configured as an operator
// configures it against `make run`: the stack's environment, its DynamoDB
// and SQS endpoints.
type oncectl struct {
	env map[string]string
	// secrets are strings no output may hold (raw keys).
	secrets []string
}

func newOncectl(stack *devstack.Stack, env map[string]string, secrets ...string) *oncectl {
	vars := maps.Clone(env)
	vars[config.EnvDynamoDBEndpoint] = stack.DynamoDBEndpoint()
	vars[config.EnvSQSEndpoint] = stack.SQSEndpoint()
	return &oncectl{env: vars, secrets: secrets}
}

// run runs oncectl args, failing the test unless it exits 0 and its output
// holds no secret, and returns its stdout.
func (o *oncectl) run(t *testing.T, args ...string) string {
	t.Helper()
	return o.exit(t, 0, args...)
}

// exit is run, the command exiting code.
func (o *oncectl) exit(t *testing.T, code int, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if got := operator.Run(t.Context(), args, func(k string) string { return o.env[k] }, &out, &errOut); got != code {
		t.Fatalf("oncectl %s = exit %d, want %d: %s%s", strings.Join(args, " "), got, code, out.String(), errOut.String())
	}
	for _, s := range o.secrets {
		if strings.Contains(out.String()+errOut.String(), s) {
			t.Errorf("oncectl %s shows %q:\n%s%s", strings.Join(args, " "), s, out.String(), errOut.String())
		}
	}
	return out.String()
}

// staleHold is a line of oncectl holds -stale -json.
type staleHold struct {
	Payment      string `json:"payment"`
	KeyHash      string `json:"key_hash"`
	Record       string `json:"record"`
	Amount       int64  `json:"amount"`
	RecordStatus string `json:"record_status"`
	NoRecord     bool   `json:"no_record"`
	Stale        bool   `json:"stale"`
	Next         string `json:"next"`
	Command      string `json:"command"`
}

// listHolds runs oncectl holds -stale -json args.
func (o *oncectl) listHolds(t *testing.T, args ...string) []staleHold {
	t.Helper()
	var lines []staleHold
	for line := range strings.Lines(o.run(t, append([]string{"holds", "-stale", "-json"}, args...)...)) {
		var l staleHold
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("holds -stale line %q: %v", line, err)
		}
		lines = append(lines, l)
	}
	return lines
}

// command is the oncectl arguments of a listing's command, its outcome
// chosen.
func command(t *testing.T, c, outcome string) []string {
	t.Helper()
	c, ok := strings.CutPrefix(strings.Replace(c, "(release | refunded -provider-refund ID)", outcome, 1), "oncectl ")
	if !ok {
		t.Fatalf("command %q: want an oncectl command", c)
	}
	return strings.Fields(c)
}

// TestOperatorFindsRefundHold: a refund made through the gateway whose
// outcome is unknown (the provider refunds and holds its answer past
// ONCE_PROVIDER_TIMEOUT, and cannot answer the reconciler's look-ups)
// leaves its record UNKNOWN and its amount held on its payment. oncectl,
// against the running devstack, finds the hold across the payments table
// (holds -stale) and on its payment (holds -tenant -payment): the
// reconciler's at first, stale once its record has not changed for
// -older-than, with reannounce next, whose command runs. The operator
// forgets the record, as one that can never be reconciled: the listing now
// shows the hold with no record, and its settle-hold -no-record command,
// run as the provider's refund says, settles it. Then nothing is held, the
// payment counts the refund once, and a retry of the key answers 422.
func TestOperatorFindsRefundHold(t *testing.T) {
	env, _, faults, stack := startRefundStack(t)
	cfg := stack.Config()
	client := dynamotest.Client(t)
	store := dynamo.New(client, cfg.Table("IdempotencyTable"))
	table := payments.NewTable(client, cfg.Table("PaymentsTable"))
	pc := provider.New(cfg.ProviderURL, stack.ProviderClient())

	const amount, held = 1000, 600
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	raw := "refund-holds-" + run
	key := idempotency.NewKey("acme", raw)
	payment := succeededPayment(t, stack.URL(), "payment-"+raw, "tok_refundTimeout", amount)
	// Another payment, refunded in full: no hold, not listed.
	other := succeededPayment(t, stack.URL(), "payment-other-"+raw, "tok_visa", amount)
	if got := send(t, stack.URL(), "/v1/refunds", "refund-other-"+run, "", fmt.Sprintf(`{"payment": %q, "amount": %d}`, other, amount)); got.status != http.StatusCreated {
		t.Fatalf("refund of the other payment = %d %s, want 201", got.status, got.body)
	}

	faults.lookupsDown.Store(true)
	body := fmt.Sprintf(`{"payment": %q, "amount": %d}`, payment, held)
	if got := send(t, stack.URL(), "/v1/refunds", raw, "", body); got.status != http.StatusGatewayTimeout {
		t.Fatalf("POST /v1/refunds = %d %s, want 504 (outcome unknown)", got.status, got.body)
	}
	if rec, err := store.Get(t.Context(), key); err != nil || rec.Status != idempotency.StatusUnknown {
		t.Fatalf("record = %s, %v; want UNKNOWN", rec.Status, err)
	}
	wantHeld(t, table, payment, raw, held, amount-held)
	pk := payments.PK("acme", payment)
	ctl := newOncectl(stack, env, raw, "refund-other-"+run)

	// The reconciler's: listed with -all only, not stale.
	if got := ctl.listHolds(t); len(got) != 0 {
		t.Errorf("holds -stale = %+v, want nothing: the hold is the reconciler's for -older-than", got)
	}
	got := ctl.listHolds(t, "-all")
	if len(got) != 1 || got[0].Payment != pk || got[0].KeyHash != key.Hash || got[0].Amount != held ||
		got[0].RecordStatus != "UNKNOWN" || got[0].Stale || got[0].Next != "wait" {
		t.Fatalf("holds -stale -all = %+v, want the hold of %d on %s, UNKNOWN, not stale, wait", got, held, pk)
	}

	// The one-payment view shows it too.
	var view struct {
		Payment    string `json:"payment"`
		Refundable int64  `json:"refundable"`
		Holds      []struct {
			KeyHash      string `json:"key_hash"`
			Amount       int64  `json:"amount"`
			RecordStatus string `json:"record_status"`
			Stale        bool   `json:"stale"`
		} `json:"holds"`
	}
	if err := json.Unmarshal([]byte(ctl.run(t, "holds", "-tenant", "acme", "-payment", payment)), &view); err != nil {
		t.Fatal(err)
	}
	if view.Payment != pk || view.Refundable != amount-held || len(view.Holds) != 1 || view.Holds[0].KeyHash != key.Hash ||
		view.Holds[0].Amount != held || view.Holds[0].RecordStatus != "UNKNOWN" || view.Holds[0].Stale {
		t.Errorf("holds -tenant acme -payment %s = %+v, want its hold of %d, UNKNOWN, not stale", payment, view, held)
	}

	// Older than -older-than: stale, reannounce next, and its command
	// runs.
	got = ctl.listHolds(t, "-older-than", "0s", "-tenant", "acme")
	if len(got) != 1 || got[0].KeyHash != key.Hash || !got[0].Stale || got[0].Next != "reannounce" || got[0].Command != "oncectl reannounce "+key.ID() {
		t.Fatalf("holds -stale -older-than 0s = %+v, want the hold stale, reannounce %s", got, key.ID())
	}
	if out := ctl.run(t, command(t, got[0].Command, "")...); !strings.Contains(out, "re-announced") {
		t.Errorf("%s = %q, want it re-announced", got[0].Command, out)
	}
	if got := ctl.listHolds(t, "-tenant", "globex", "-older-than", "0s", "-all"); len(got) != 0 {
		t.Errorf("holds -stale -tenant globex = %+v, want nothing: the hold is acme's", got)
	}

	// Never to be reconciled: the operator checks the provider and forgets
	// the record.
	refs, _, err := pc.Refunds(t.Context(), mustPayment(t, table, payment).ProviderChargeID)
	if err != nil || len(refs) != 1 || refs[0].Amount != held {
		t.Fatalf("provider refunds = %+v, %v; want the lost request's", refs, err)
	}
	var shown struct {
		LeaseToken string `json:"lease_token"`
	}
	// Without -confirm, forget shows the record and fails asking for it.
	if err := json.Unmarshal([]byte(ctl.exit(t, 1, "forget", key.ID())), &shown); err != nil || shown.LeaseToken == "" {
		t.Fatalf("forget %s: %v, lease token %q", key.ID(), err, shown.LeaseToken)
	}
	ctl.run(t, "forget", "-confirm", shown.LeaseToken, key.ID())

	got = ctl.listHolds(t)
	if len(got) != 1 || got[0].KeyHash != key.Hash || !got[0].NoRecord || !got[0].Stale || got[0].Next != "settle-hold -no-record" {
		t.Fatalf("holds -stale after forget = %+v, want the hold stale with no record, settle-hold -no-record", got)
	}
	ctl.run(t, command(t, got[0].Command, "refunded -provider-refund "+refs[0].ID)...)

	if got := ctl.listHolds(t, "-all"); len(got) != 0 {
		t.Errorf("holds -stale -all after settle-hold = %+v, want nothing held", got)
	}
	p := mustPayment(t, table, payment)
	if p.AmountRefunded != held || p.Refundable != amount-held || len(p.Holds) != 0 {
		t.Errorf("payment: refunded %d, refundable %d, holds %v; want %d, %d, none", p.AmountRefunded, p.Refundable, p.Holds, held, amount-held)
	}
	if again := send(t, stack.URL(), "/v1/refunds", raw, "", body); again.status != http.StatusUnprocessableEntity ||
		!strings.Contains(again.body, "idempotency_key_reused") {
		t.Errorf("retry after settle-hold = %d %s, want 422 idempotency_key_reused", again.status, again.body)
	}
	if sum, n := refunded(t, pc, p.ProviderChargeID); sum != held || n != 1 {
		t.Errorf("the provider refunded %d in %d refunds, want %d in one", sum, n, held)
	}
}
