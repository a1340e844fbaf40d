package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
)

// The outcomes settle-order takes: what the operator found at the provider
// under the order's forwarded key.
const (
	outcomeCharged    = "charged"
	outcomeDeclined   = "declined"
	outcomeNotCharged = "not_charged"
)

// providerID is the shape settle-order accepts for a provider's charge ID
// and a decline's failure code: what the provider's answers carry, no
// spaces or quotes.
var (
	providerID  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	failureCode = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

// settleOrderView is what settle-order prints: the record and its order as
// read, the outcome the operator gave and what it leads to, and, once
// acted, the record and order as they are then.
type settleOrderView struct {
	Record     string `json:"record"`
	Tenant     string `json:"tenant"`
	Route      string `json:"route"`
	Status     string `json:"status"`
	Point      string `json:"recovery_point"`
	LeaseToken string `json:"lease_token"`
	ForwardKey string `json:"forward_key"`
	Order      string `json:"order"`
	// OrderStatus and OrderCharge are the stored order's, as read before.
	OrderStatus string `json:"order_status"`
	OrderCharge string `json:"order_charge,omitempty"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	// Outcome is charged, declined or not_charged; Charge and FailureCode
	// the operator's.
	Outcome     string `json:"outcome"`
	Charge      string `json:"charge,omitempty"`
	FailureCode string `json:"failure_code,omitempty"`
	// Provider is what the provider holds under the forwarded key, as
	// looked up (ONCE_PROVIDER_URL set), or that it was not looked up.
	Provider string `json:"provider"`
	// Plan says what -confirm does.
	Plan string `json:"plan"`
	// DryRun: nothing was written (no -confirm).
	DryRun bool `json:"dry_run"`
	// Settled: this run completed the record.
	Settled bool `json:"settled"`
	// ProviderCalls is how many calls this run made to the provider (only
	// not_charged makes one).
	ProviderCalls int `json:"provider_calls"`
	// After the run: the record's status and stored answer's status, and
	// the order's status, charge and receipt.
	StatusAfter       string `json:"status_after,omitempty"`
	PointAfter        string `json:"recovery_point_after,omitempty"`
	AnswerStatus      int    `json:"answer_status,omitempty"`
	OrderStatusAfter  string `json:"order_status_after,omitempty"`
	OrderChargeAfter  string `json:"order_charge_after,omitempty"`
	OrderFailureAfter string `json:"order_failure_code_after,omitempty"`
	OrderReceiptAfter string `json:"order_receipt_after,omitempty"`
}

// settleOrder completes an order request left UNKNOWN at order_created
// (typically by the key-retention guard, orders.ErrKeyRetention) with what
// the operator found at the provider, through the code the live request
// and the reconciler run: orders.Flow, resumed by the orders Resolver, with
// a Charger that answers the operator's charge (charged, declined) or is
// the provider itself (not-charged), and the key-retention guard off; the
// record completed by recovery.Reconciler.Reconcile, a conditional write
// fenced on the lease token read, with the order's effects in the same
// transaction. Without -confirm it prints what it would do and writes
// nothing.
func (t *Tool) settleOrder(ctx context.Context, args []string) error {
	fs := t.flags("settle-order", "(-charged CHARGE | -declined CHARGE -failure-code CODE | -not-charged) [-confirm LEASE-TOKEN] [-json] (RECORD | -tenant T -key KEY)",
		"Complete an order request (POST /v1/orders) left UNKNOWN at order_created, the order needing review\n"+
			"(order_needs_review: it is older than the provider remembers its forwarded key, ONCE_PROVIDER_KEY_RETENTION),\n"+
			"with what you found at the provider under the order's forwarded key (forward_key, as shown):\n"+
			"  -charged CHARGE      a succeeded charge: the order is paid with it, the record completed with the\n"+
			"                       201 the request would have answered, and the order's receipt queued;\n"+
			"  -declined CHARGE -failure-code CODE\n"+
			"                       a failed charge: the order failed, the record completed with the 402 decline;\n"+
			"  -not-charged         no charge exists: the order is charged now, once, through the provider the api\n"+
			"                       uses (ONCE_PROVIDER_URL, ONCE_PROVIDER_AUTH, ONCE_PROVIDER_TIMEOUT), under the\n"+
			"                       order's own forwarded key, and completed with the provider's answer.\n"+
			"The amount and currency are the recorded request's. It runs the request's own phases, as the\n"+
			"reconciler would, without the key-retention guard. An order younger than the provider remembers its\n"+
			"forwarded key (ONCE_PROVIDER_KEY_RETENTION less its margin; 0: for ever) is refused: the reconciler\n"+
			"settles it itself (`oncectl reannounce`). With ONCE_PROVIDER_URL set, the forwarded key is looked up at\n"+
			"the provider first: a charge found that is not the one given, any charge with -not-charged, or a\n"+
			"failed lookup is refused; without it, -charged and -declined are taken on your word.\n"+
			"Without -confirm it only shows what it would do; -confirm takes the lease token shown: the record is\n"+
			"claimed (moved to a new lease token) and completed only if it was still UNKNOWN under it. A record a\n"+
			"concurrent settle has already charged (charge_created) is finished with the charge recorded.\n"+
			"The claim reaches the reconciler, which refuses the order again: expect ReconcileUnroutableAlarm to\n"+
			"page once per settle, clearing after 5 minutes.\n"+
			"A retry of the key then replays the answer stored. A record that is not UNKNOWN, not of POST /v1/orders,\n"+
			"past order_created, or whose order holds another answer than the one given, is refused.\n"+
			"Exit code: 0 when this run completed the record with the outcome given; 1 for a dry run, a refusal,\n"+
			"a record completed meanwhile by another run (the reconciler, or another settle: its answer is shown),\n"+
			"one completed with a charge recorded before that is not the one given (named), or a failure (the record\n"+
			"is left UNKNOWN: look at it again, and run it again); 2 on a usage error.")
	read := t.recordArg(fs)
	charged := fs.String("charged", "", "the provider's succeeded charge under the order's forwarded key")
	declined := fs.String("declined", "", "the provider's failed charge under the order's forwarded key (with -failure-code)")
	code := fs.String("failure-code", "", "with -declined: the failed charge's failure code (card_declined)")
	notCharged := fs.Bool("not-charged", false, "no charge exists under the order's forwarded key: charge it now through the provider")
	confirm := fs.String("confirm", "", "the record's lease token, as shown: settle it")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := t.parse(fs, args, -1); err != nil {
		return err
	}
	outcome, charge := "", ""
	switch {
	case *charged != "" && *declined == "" && !*notCharged:
		outcome, charge = outcomeCharged, *charged
	case *declined != "" && *charged == "" && !*notCharged:
		outcome, charge = outcomeDeclined, *declined
	case *notCharged && *charged == "" && *declined == "":
		outcome = outcomeNotCharged
	default:
		return usageError{fs, "give one of -charged CHARGE, -declined CHARGE -failure-code CODE, -not-charged"}
	}
	switch {
	case charge != "" && !providerID.MatchString(charge):
		return usageError{fs, fmt.Sprintf("-%s: %q is not a provider's charge ID (letters, digits, _ and -)", outcome, charge)}
	case outcome == outcomeDeclined && *code == "":
		return usageError{fs, "-declined wants -failure-code: the failed charge's failure code"}
	case outcome == outcomeDeclined && !failureCode.MatchString(*code):
		return usageError{fs, fmt.Sprintf("-failure-code: %q is not a failure code (lower-case letters, digits and _)", *code)}
	case outcome != outcomeDeclined && *code != "":
		return usageError{fs, "-failure-code goes with -declined only"}
	}
	// The provider, when configured: -not-charged charges through it, and
	// every outcome is checked against what it holds under the key.
	var p *provider.Client
	if outcome == outcomeNotCharged || t.cfg.ProviderURL != "" {
		var err error
		if p, err = t.provider(); err != nil {
			return err
		}
	}
	var charger orders.Charger = operatorCharge{outcome: outcome, id: charge, failureCode: *code}
	if outcome == outcomeNotCharged {
		charger = p
	}
	key, rec, err := read(ctx, args)
	if err != nil {
		return err
	}
	v := settleOrderView{
		Record: key.ID(), Tenant: key.Tenant, Route: rec.Route, Status: string(rec.Status), Point: rec.Point,
		LeaseToken: rec.LeaseToken, Outcome: outcome, Charge: charge, FailureCode: *code, DryRun: true,
	}
	if rec.External {
		v.ForwardKey = idempotency.ResumeSteps(nil, rec, nil).ForwardKey(orders.PointChargeCreated)
	}
	o, refusal, err := t.check(ctx, p, rec, &v)
	if err != nil {
		return err
	}
	if o.ID != "" {
		v.Order, v.OrderStatus, v.OrderCharge, v.Amount, v.Currency = o.ID, string(o.Status), o.Charge, o.Amount, o.Currency
		v.Plan = settlePlan(o, outcome, charge, *code)
	}
	switch {
	case refusal != "":
		err = fmt.Errorf("%s is not settled: %s", key.ID(), refusal)
	case *confirm == "":
		err = fmt.Errorf("%s is not settled (dry run): confirm with -confirm %s", key.ID(), rec.LeaseToken)
	case *confirm != rec.LeaseToken:
		err = fmt.Errorf("%s is not settled: it is under lease token %s now, not %s: it changed since it was shown; look at it again",
			key.ID(), rec.LeaseToken, *confirm)
	default:
		v.DryRun = false
		err = t.settle(ctx, p, rec, charger, &v)
	}
	if werr := t.printSettle(v, *asJSON); werr != nil {
		return errors.Join(err, werr)
	}
	if err != nil {
		return err
	}
	slog.New(slog.NewJSONHandler(t.errOut, nil)).Info("order settled by an operator",
		"record", key.ID(), "tenant", key.Tenant, "route", rec.Route, "order", v.Order, "outcome", outcome,
		"charge", charge, "failure_code", *code, "provider_calls", v.ProviderCalls,
		"status", v.StatusAfter, "answer_status", v.AnswerStatus, "order_status", v.OrderStatusAfter, "order_charge", v.OrderChargeAfter)
	return nil
}

// settleable reads rec's order and says why rec may not be settled as
// outcome ("" when it may): it must be an UNKNOWN record of POST /v1/orders
// at order_created, whose recorded request decodes and whose order is
// stored, and the order must not hold another answer than outcome's (one
// that holds an answer is settled with it by the request's phases, without
// the provider: the same answer given is fine). The order is returned when
// it could be read.
func (t *Tool) settleable(ctx context.Context, rec idempotency.Record, outcome, charge, code string) (orders.Order, string, error) {
	switch {
	case rec.Route != orders.RouteCreate:
		return orders.Order{}, fmt.Sprintf("it is a record of %s, not of %s", rec.Route, orders.RouteCreate), nil
	case rec.Status == idempotency.StatusCompleted:
		return orders.Order{}, "it is COMPLETED: its retries replay its answer (`oncectl show -bodies`)", nil
	case rec.Status == idempotency.StatusInProgress && !rec.Expired(t.now()):
		return orders.Order{}, fmt.Sprintf("it is IN_PROGRESS and its lease runs until %s: its request may still be running; once the lease has run out "+
			"the recovery check hands it to the reconciler as UNKNOWN (or `oncectl reannounce` does): settle it then", rec.ExpiresAt.UTC().Format(time.RFC3339)), nil
	case rec.Status == idempotency.StatusInProgress:
		return orders.Order{}, "it is IN_PROGRESS and its lease has run out: its recovery check hands it to the reconciler as UNKNOWN " +
			"(`oncectl reannounce` does it now); settle it once it is UNKNOWN and the reconciler has left it so", nil
	case rec.Status != idempotency.StatusUnknown:
		return orders.Order{}, fmt.Sprintf("it is %s, not UNKNOWN", rec.Status), nil
	}
	req, err := orders.Decode(rec.Request)
	if err != nil {
		return orders.Order{}, fmt.Sprintf("its recorded request does not decode (%v)", err), nil
	}
	id, recCharge, recStatus := orders.Recorded(rec)
	if !orders.ValidID(id) {
		return orders.Order{}, fmt.Sprintf("its first phase recorded no order (%q)", id), nil
	}
	stored, err := orders.NewTable(t.db, t.cfg.Table("OrdersTable")).Get(ctx, rec.Key.Tenant, id)
	if errors.Is(err, orders.ErrNotFound) {
		return orders.Order{ID: id, Amount: req.Amount, Currency: req.Currency}, fmt.Sprintf("its order %s is not stored: nothing to settle", id), nil
	}
	if err != nil {
		return orders.Order{}, "", fmt.Errorf("read order %s: %w", id, err)
	}
	if rec.Point != orders.PointOrderCreated {
		return stored, fmt.Sprintf("it is at %s, past order_created: the provider's answer is recorded (charge %q, %s), and the reconciler "+
			"completes it from there without the provider; `oncectl reannounce` hands it to the reconciler again", rec.Point, recCharge, recStatus), nil
	}
	if age, limit, remembered := orders.RecordKeyRemembered(rec, stored, t.cfg.ProviderKeyRetention, t.now()); remembered {
		keeps := fmt.Sprintf("for ever (%s is 0)", config.EnvProviderKeyRetention)
		if limit > 0 {
			keeps = fmt.Sprintf("%s less a margin: %s (%s)", t.cfg.ProviderKeyRetention, limit, config.EnvProviderKeyRetention)
		}
		return stored, fmt.Sprintf("its request is %s old, and the provider still remembers its forwarded key, kept %s: "+
			"the reconciler settles it itself, calling the provider under that key, which answers with any charge it made; "+
			"`oncectl reannounce` hands it to the reconciler now", age.Round(time.Second), keeps), nil
	}
	switch {
	case stored.Status == orders.StatusFailed && stored.Charge == "":
		return stored, fmt.Sprintf("its order records the provider's rejection (%s): the reconciler completes it with that answer; `oncectl reannounce`", stored.FailureCode), nil
	case stored.Charge == "":
		return stored, "", nil
	case outcome == outcomeNotCharged:
		return stored, fmt.Sprintf("its order holds charge %s (%s), but -not-charged says none exists: check the provider again", stored.Charge, stored.Status), nil
	case stored.Charge != charge || (outcome == outcomeCharged) != (stored.Status == orders.StatusPaid) || (outcome == outcomeDeclined && stored.FailureCode != code):
		return stored, fmt.Sprintf("its order holds another answer, charge %s %s (failure code %q): check the provider again", stored.Charge, stored.Status, stored.FailureCode), nil
	}
	return stored, "", nil
}

// check reads rec's order and says why rec may not be settled as v's
// outcome ("" when it may): settleable's refusals, then, with p (the
// provider configured), what the provider holds under the order's
// forwarded key (v.Provider says it).
func (t *Tool) check(ctx context.Context, p *provider.Client, rec idempotency.Record, v *settleOrderView) (orders.Order, string, error) {
	o, refusal, err := t.settleable(ctx, rec, v.Outcome, v.Charge, v.FailureCode)
	if err != nil || refusal != "" {
		return o, refusal, err
	}
	if p == nil {
		v.Provider = fmt.Sprintf("not looked up (%s is not set): settled on your word", config.EnvProviderURL)
		return o, "", nil
	}
	return o, t.atProvider(ctx, p, o, v), nil
}

// atProvider looks the order's forwarded key up at the provider and says
// why v's outcome may not be settled with what it holds ("" when it may):
// a charge that is not the one given, any charge with -not-charged, or a
// lookup that failed.
func (t *Tool) atProvider(ctx context.Context, p *provider.Client, o orders.Order, v *settleOrderView) string {
	if v.ForwardKey == "" {
		return "its record has no forwarded key to look up at the provider"
	}
	ch, err := p.Lookup(ctx, v.ForwardKey)
	switch {
	case errors.Is(err, provider.ErrNoCharge):
		v.Provider = "no charge under the forwarded key"
		if v.Outcome != outcomeNotCharged {
			v.Provider += ": settled on your word"
		}
		return ""
	case err != nil:
		v.Provider = "lookup failed"
		return fmt.Sprintf("looking its forwarded key up at the provider failed (%v): look again later", err)
	}
	found := fmt.Sprintf("charge %s %s of %d %s", ch.ID, ch.Status, ch.Amount, strings.ToUpper(ch.Currency))
	use := "-charged " + ch.ID
	if ch.Status == provider.StatusFailed {
		found += fmt.Sprintf(" (failure code %s)", ch.FailureCode)
		use = fmt.Sprintf("-declined %s -failure-code %s", ch.ID, ch.FailureCode)
	}
	v.Provider = found + " under the forwarded key"
	switch {
	case ch.Amount != o.Amount || !strings.EqualFold(ch.Currency, o.Currency):
		return fmt.Sprintf("the provider holds %s under its forwarded key, not of the order's %d %s: look at it at the provider",
			found, o.Amount, strings.ToUpper(o.Currency))
	case v.Outcome == outcomeNotCharged:
		return fmt.Sprintf("a charge exists: the provider holds %s under its forwarded key: use %s", found, use)
	case ch.ID != v.Charge || (v.Outcome == outcomeCharged) != (ch.Status == provider.StatusSucceeded) ||
		(v.Outcome == outcomeDeclined && ch.FailureCode != v.FailureCode):
		return fmt.Sprintf("the provider holds another answer under its forwarded key, %s: use %s", found, use)
	}
	return ""
}

// settlePlan says what settling o as outcome does.
func settlePlan(o orders.Order, outcome, charge, code string) string {
	amount := fmt.Sprintf("%d %s", o.Amount, strings.ToUpper(o.Currency))
	switch outcome {
	case outcomeCharged:
		return fmt.Sprintf("complete the record with 201 and order %s paid with charge %s (%s), its receipt queued", o.ID, charge, amount)
	case outcomeDeclined:
		return fmt.Sprintf("complete the record with 402 card_declined and order %s failed with charge %s (%s, %s)", o.ID, charge, amount, code)
	}
	return fmt.Sprintf("charge order %s (%s) through the provider under its forwarded key, once, and complete the record with the provider's answer "+
		"(201 paid, receipt queued; 402 declined; 422 rejected)", o.ID, amount)
}

// settle claims rec, resumes it through the orders Resolver with charger,
// the key-retention guard off, and completes it with the Reconciler; then
// reads the record and the order again into v. An error when this run did
// not complete the record as v's outcome says.
//
// The claim is a fenced MarkUnknown of rec under its lease token read, to a
// new one, as reannounce's: of several settle-orders of one record read
// under one token, one claims it; the reconciler, or a settle that claimed
// before, finds its lease gone at its next write. A settle that read the
// record under a token a settle claimed it with may claim it again after
// that one recorded its charge (charge_created): the record is read again
// after the claim, and one at charge_created is finished with the charge
// recorded (finishRecorded), calling nothing; one that moved on otherwise
// is refused (check). A run whose completion finds its lease gone reports
// the record as it is then (superseded).
func (t *Tool) settle(ctx context.Context, p *provider.Client, rec idempotency.Record, charger orders.Charger, v *settleOrderView) error {
	now := t.now()
	expires := now.Add(t.cfg.Retention)
	if rec.ExpiresAt.After(expires) { // extended, never shortened, as reannounce does
		expires = rec.ExpiresAt
	}
	claim := idempotency.NewToken()
	if err := t.store.MarkUnknown(ctx, rec.Key, rec.LeaseToken, claim, expires, now); err != nil {
		var conflict *idempotency.ConflictError
		if errors.As(err, &conflict) {
			return fmt.Errorf("%s is not settled: it changed meanwhile (%v); look at it again", rec.Key.ID(), err)
		}
		return fmt.Errorf("%s is not settled: claim it: %w", rec.Key.ID(), err)
	}
	key := rec.Key
	rec, err := t.store.Get(ctx, key)
	switch {
	case err != nil:
		return fmt.Errorf("%s is not settled: read it after claiming it: %w", key.ID(), err)
	case rec.LeaseToken != claim:
		return t.superseded(ctx, key, v, "after it was claimed")
	case rec.Status == idempotency.StatusUnknown && rec.Point == orders.PointChargeCreated:
		return t.finishRecorded(ctx, rec, v)
	}
	switch _, refusal, err := t.check(ctx, p, rec, v); {
	case err != nil:
		return fmt.Errorf("%s is not settled: check it again after claiming it: %w", key.ID(), err)
	case refusal != "":
		return fmt.Errorf("%s is not settled: after it was claimed: %s", key.ID(), refusal)
	}
	counted := &countingCharger{next: charger}
	resolved, rerr := t.reconcile(ctx, rec, counted)
	if _, real := charger.(*provider.Client); real {
		v.ProviderCalls = counted.n()
	}
	if rerr != nil {
		t.readAfter(ctx, key, v)
		if v.ProviderCalls > 0 {
			return fmt.Errorf("%w; the provider call may have charged under its forwarded key %s: under the same key, -not-charged is safe to run again "+
				"(it looks the key up first, and names a charge it finds)", rerr, v.ForwardKey)
		}
		return rerr
	}
	if !resolved {
		return t.superseded(ctx, key, v, "while it was settled")
	}
	if _, err := t.readAfter(ctx, key, v); err != nil {
		return fmt.Errorf("%s was settled, but reading it again failed: %w", key.ID(), err)
	}
	v.Settled = true
	return nil
}

// reconcile resumes rec through the orders Resolver with charger and the
// key-retention guard off, and completes it with the Reconciler. resolved:
// this run completed it; false without an error when its lease was gone.
func (t *Tool) reconcile(ctx context.Context, rec idempotency.Record, charger orders.Charger) (resolved bool, err error) {
	resolver := orders.NewResolver(t.store, orders.Flow{
		Provider: charger,
		Reader:   orders.NewTable(t.db, t.cfg.Table("OrdersTable")),
		Orders:   t.cfg.Table("OrdersTable"),
		Outbox:   t.cfg.Table("OutboxTable"),
		Timeout:  t.cfg.ProviderTimeout,
		// The operator's answer replaces the provider's memory of the key.
		KeyRetention: 0,
	}, t.now)
	var metrics resultCounter
	log := slog.New(slog.NewJSONHandler(t.errOut, nil)).With("record", rec.Key.ID(), "tenant", rec.Key.Tenant, "route", rec.Route, "by", "oncectl settle-order")
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store: t.store, Resolvers: idempotency.Resolvers{orders.RouteCreate: resolver},
		Settle: t.cfg.ProviderSettle, Retention: t.cfg.Retention, Logger: log, Metrics: &metrics, Now: t.now,
		// As the api's middleware checks its answers (the orders route is
		// served by Lambda).
		Deliverable: apigw.Deliverable,
	})
	if err != nil {
		return false, err
	}
	switch err := r.Reconcile(ctx, log, rec); {
	case err != nil:
		return false, fmt.Errorf("%s is not settled: %w (see the log above); look at it with `oncectl show`, and run it again", rec.Key.ID(), err)
	case metrics.has(recovery.MetricUnroutable):
		return false, fmt.Errorf("%s is not settled: the order's phases could not resume it (see the log above)", rec.Key.ID())
	}
	return metrics.has(recovery.MetricResolved), nil
}

// finishRecorded completes rec, UNKNOWN at charge_created, with the
// provider's answer its phases recorded (another settle's, or a request's):
// the phases call nothing from there, and the recorded charge stands
// whatever the operator gave. An error when this run did not complete it,
// or when the charge recorded is not the operator's.
func (t *Tool) finishRecorded(ctx context.Context, rec idempotency.Record, v *settleOrderView) error {
	_, charge, status := orders.Recorded(rec)
	resolved, err := t.reconcile(ctx, rec, noCall{})
	if err != nil {
		t.readAfter(ctx, rec.Key, v)
		return err
	}
	after, gerr := t.readAfter(ctx, rec.Key, v)
	if !resolved {
		if gerr != nil {
			return fmt.Errorf("%s is not settled by this run: its charge %s (%s) was recorded by another run, and its completion found it changed; reading it again failed: %w",
				rec.Key.ID(), charge, status, gerr)
		}
		return fmt.Errorf("%s is not settled by this run: its charge %s (%s) was recorded by another run, which it is now %s with; look at it with `oncectl show`",
			rec.Key.ID(), charge, status, after.Status)
	}
	v.Settled = true
	if !v.sameAnswer(charge, status) {
		return fmt.Errorf("%s was completed by this run, but with the charge another run recorded before it, %s (%s), not the one given: look at it at the provider",
			rec.Key.ID(), charge, status)
	}
	return nil
}

// sameAnswer says whether a charge recorded with status (and, failed, the
// order's failure code read after) is v's outcome: any answer is
// -not-charged's, the provider's.
func (v *settleOrderView) sameAnswer(charge string, status orders.Status) bool {
	return v.Outcome == outcomeNotCharged || (charge == v.Charge &&
		(v.Outcome == outcomeCharged) == (status == orders.StatusPaid) &&
		(v.Outcome != outcomeDeclined || v.OrderFailureAfter == v.FailureCode))
}

// superseded is the error of a run that found its lease gone (when): it
// reads the record again into v and says what it is now, finishing it when
// it is UNKNOWN at charge_created (finishRecorded).
func (t *Tool) superseded(ctx context.Context, key idempotency.Key, v *settleOrderView, when string) error {
	rec, err := t.readAfter(ctx, key, v)
	switch {
	case err != nil:
		return fmt.Errorf("%s is not settled: it changed %s, and reading it again failed: %w", key.ID(), when, err)
	case rec.Status == idempotency.StatusUnknown && rec.Point == orders.PointChargeCreated:
		return t.finishRecorded(ctx, rec, v)
	case rec.Status == idempotency.StatusCompleted:
		_, charge, status := orders.Recorded(rec)
		as := "not the outcome given: look at it with `oncectl show`, and at the provider"
		if v.sameAnswer(charge, status) {
			as = "the outcome given: nothing more to do"
		}
		return fmt.Errorf("%s is not settled by this run: it changed %s, and another run (the reconciler, or another settle-order) completed it, "+
			"answer %d, charge %q %s: %s", key.ID(), when, v.AnswerStatus, charge, status, as)
	case v.ProviderCalls > 0:
		return fmt.Errorf("%s is not settled: it changed %s, and is %s at %s: the provider call this run made may have charged under its forwarded key %s; "+
			"run settle-order again: under the same key, -not-charged is safe (it looks the key up first, and names a charge it finds)",
			key.ID(), when, rec.Status, rec.Point, v.ForwardKey)
	}
	return fmt.Errorf("%s is not settled: it changed %s, and is %s at %s; look at it again", key.ID(), when, rec.Status, rec.Point)
}

// readAfter reads the record of key and its order into v, and returns the
// record.
func (t *Tool) readAfter(ctx context.Context, key idempotency.Key, v *settleOrderView) (idempotency.Record, error) {
	after, err := t.store.Get(ctx, key)
	if err == nil {
		v.StatusAfter, v.PointAfter = string(after.Status), after.Point
		if after.Response != nil {
			v.AnswerStatus = after.Response.Status
		}
	}
	if v.Order != "" {
		if o, oerr := orders.NewTable(t.db, t.cfg.Table("OrdersTable")).Get(ctx, key.Tenant, v.Order); oerr == nil {
			v.OrderStatusAfter, v.OrderChargeAfter, v.OrderFailureAfter, v.OrderReceiptAfter = string(o.Status), o.Charge, o.FailureCode, string(o.Receipt)
		}
	}
	return after, err
}

// printSettle prints v as one JSON object, or as text.
func (t *Tool) printSettle(v settleOrderView, asJSON bool) error {
	if asJSON {
		return t.writeJSON(v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "record %s (%s %s at %s, lease token %s)\n", v.Record, v.Route, v.Status, v.Point, v.LeaseToken)
	if v.Order != "" {
		fmt.Fprintf(&b, "order %s: %s", v.Order, v.OrderStatus)
		if v.OrderCharge != "" {
			fmt.Fprintf(&b, ", charge %s", v.OrderCharge)
		}
		fmt.Fprintf(&b, " (%d %s)\n", v.Amount, strings.ToUpper(v.Currency))
	}
	if v.ForwardKey != "" {
		fmt.Fprintf(&b, "forwarded key %s\n", v.ForwardKey)
	}
	fmt.Fprintf(&b, "outcome %s", v.Outcome)
	if v.Charge != "" {
		fmt.Fprintf(&b, " %s", v.Charge)
	}
	if v.FailureCode != "" {
		fmt.Fprintf(&b, " (%s)", v.FailureCode)
	}
	b.WriteString("\n")
	if v.Plan != "" {
		verb := "would"
		if !v.DryRun {
			verb = "to"
		}
		fmt.Fprintf(&b, "%s %s\n", verb, v.Plan)
	}
	if v.Provider != "" {
		fmt.Fprintf(&b, "provider: %s\n", v.Provider)
	}
	if !v.DryRun {
		fmt.Fprintf(&b, "settled %v", v.Settled)
		if v.StatusAfter != "" {
			fmt.Fprintf(&b, ": record %s at %s", v.StatusAfter, v.PointAfter)
			if v.AnswerStatus != 0 {
				fmt.Fprintf(&b, ", answer %d", v.AnswerStatus)
			}
		}
		if v.OrderStatusAfter != "" {
			fmt.Fprintf(&b, "; order %s", v.OrderStatusAfter)
			if v.OrderChargeAfter != "" {
				fmt.Fprintf(&b, ", charge %s", v.OrderChargeAfter)
			}
			if v.OrderFailureAfter != "" {
				fmt.Fprintf(&b, " (%s)", v.OrderFailureAfter)
			}
			if v.OrderReceiptAfter != "" {
				fmt.Fprintf(&b, ", receipt %s", v.OrderReceiptAfter)
			}
		}
		fmt.Fprintf(&b, "; %d provider call(s)\n", v.ProviderCalls)
	}
	_, err := fmt.Fprint(t.out, b.String())
	return err
}

// provider returns the client of the payment provider the api uses, from
// the same variables (config.EnvProviderURL and the rest), signed with the
// DynamoDB client's credentials when ONCE_PROVIDER_AUTH says so; an error
// when ONCE_PROVIDER_URL is not set.
func (t *Tool) provider() (*provider.Client, error) {
	var o dynamodb.Options
	if c, ok := t.db.(*dynamodb.Client); ok {
		o = c.Options()
	}
	p, err := provider.FromConfig(t.cfg, o.Credentials, o.Region)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("-not-charged charges through the payment provider, and %s is not set: "+
			"set it (with %s and %s) as the api function has them", config.EnvProviderURL, config.EnvProviderAuth, config.EnvProviderTimeout)
	}
	return p, nil
}

// operatorCharge is the Charger of an order settled with the charge the
// operator found at the provider: it answers that charge, of the request's
// amount and currency, succeeded (charged) or as the provider's decline
// (declined), and calls nothing.
type operatorCharge struct {
	outcome, id, failureCode string
}

// Charge returns the operator's charge, as the provider would have.
func (c operatorCharge) Charge(_ context.Context, _ string, req provider.ChargeRequest) (provider.Charge, error) {
	ch := provider.Charge{ID: c.id, Status: provider.StatusSucceeded, Amount: req.Amount, Currency: req.Currency}
	if c.outcome == outcomeDeclined {
		ch.Status, ch.FailureCode = provider.StatusFailed, c.failureCode
		return provider.Charge{}, &provider.DeclinedError{Code: c.failureCode, Message: "declined, as an operator found at the provider", Charge: ch}
	}
	return ch, nil
}

// noCall is the Charger of a record finished from charge_created, whose
// phases call no provider: it fails, calling nothing.
type noCall struct{}

// Charge fails: nothing is called.
func (noCall) Charge(context.Context, string, provider.ChargeRequest) (provider.Charge, error) {
	return provider.Charge{}, errors.New("operator: no provider call is made past order_created")
}

// countingCharger counts the calls that reach next (the provider's, when
// it is the provider).
type countingCharger struct {
	next  orders.Charger
	mu    sync.Mutex
	calls int
}

func (c *countingCharger) Charge(ctx context.Context, key string, req provider.ChargeRequest) (provider.Charge, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.next.Charge(ctx, key, req)
}

func (c *countingCharger) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// resultCounter records the Reconciler's counts: what became of the record.
type resultCounter struct {
	mu    sync.Mutex
	names map[string]int
}

// Count records names.
func (c *resultCounter) Count(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.names == nil {
		c.names = map[string]int{}
	}
	for _, n := range names {
		c.names[n]++
	}
}

func (c *resultCounter) has(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name] > 0
}
