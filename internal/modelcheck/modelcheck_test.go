package modelcheck

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/fault"
)

// Environment of the tests.
const (
	// envSeed fixes the (first) seed; otherwise each run draws one.
	envSeed = "MODELCHECK_SEED"
	// envTime makes TestModelCheck run fresh seeds until it has passed
	// (`make check` sets it from CHECK_TIME).
	envTime = "MODELCHECK_TIME"
	// envPlant names a plant (see plants) to put in the random runs too, to
	// see how often random histories catch it.
	envPlant = "MODELCHECK_PLANT"
	// envTTL=on turns DynamoDB Local's TTL on in the random runs (see
	// runConfig.ttl).
	envTTL = "MODELCHECK_TTL"
	// envProfile restricts the random runs to one profile (see profiles).
	envProfile = "MODELCHECK_PROFILE"
)

// profiles are the workloads of the random runs: mixed (every endpoint,
// source and fault point), handover (see runConfig.handover), refunds
// (see runConfig.only), orders (see runConfig.bursts) and settling (see
// runConfig.settling).
var profiles = []string{"mixed", "handover", "refunds", "orders", "settling"}

// bounded are the profiles of the bounded run (`make test`): orders, whose
// retries wait for leases and slow providers, would add half a minute.
var bounded = []string{"mixed", "handover", "refunds", "settling"}

// profileConfig is the bounded run of a profile.
func profileConfig(seed uint64, profile string) runConfig {
	cfg := boundedConfig(seed)
	cfg.ttl = os.Getenv(envTTL) == "on"
	switch profile {
	case "handover":
		// Fewer keys, each in use longer: the key must still draw
		// requests once recovery has released it, of either body alike.
		// Half the completions land late.
		cfg.handover, cfg.keysPerTenant, cfg.spread, cfg.late = true, 3, 1, 0.5
	case "refunds":
		// Every key races the tenant's other keys for what is left of
		// one payment. Few refunds execute (most are refused by their
		// hold, which no fault point follows): most of those that may
		// carry a fault.
		cfg.only, cfg.faultRate = "refunds", 0.8
	case "orders":
		// Every key an order resumed by retries racing each other; a
		// shorter history (one round per key), half the completions and a
		// tenth of the recovery points late.
		cfg.only, cfg.bursts, cfg.keysPerTenant, cfg.history, cfg.late = "orders", true, 3, 8*time.Second, 0.5
		cfg.clients = burstLanes * len(cfg.tenants) * cfg.keysPerTenant
	case "settling":
		// Every key a refund of the tenant's one payment, still pending
		// when the history starts; a shorter history.
		cfg.only, cfg.settling, cfg.keysPerTenant, cfg.history = "refunds", true, 4, 8*time.Second
		// As in refunds, few refunds execute (those sent before their
		// payment is settled are refused by their hold too).
		cfg.faultRate = 0.8
	}
	return cfg
}

// TestModelCheck runs random concurrent histories against the devstack and
// checks them (see the package documentation): one bounded run of each
// profile but orders (see bounded), or fresh seeds for MODELCHECK_TIME, the
// profiles in turn.
func TestModelCheck(t *testing.T) {
	seed := seedFromEnv(t)
	budget := time.Duration(0)
	if v := os.Getenv(envTime); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: not a positive Go duration", envTime, v)
		}
		budget = d
	}
	chosen := profiles
	if v := os.Getenv(envProfile); v != "" {
		if !slices.Contains(profiles, v) {
			t.Fatalf("%s=%q: not one of %v", envProfile, v, profiles)
		}
		chosen = []string{v}
	}
	if budget == 0 {
		if os.Getenv(envProfile) == "" {
			chosen = bounded
		}
		crashed := 0
		for _, pr := range chosen {
			t.Run(pr, func(t *testing.T) { crashed += checkRun(t, profileConfig(seed, pr)) })
		}
		if crashed == 0 {
			t.Errorf("no request crashed at an injected fault point in any profile: are the crashes still injected?")
		}
		return
	}
	deadline := time.Now().Add(budget)
	if d, ok := t.Deadline(); ok && d.Add(-5*time.Minute).Before(deadline) {
		deadline = d.Add(-5 * time.Minute)
		t.Logf("%s=%v is longer than go test's -timeout allows: running until %s", envTime, budget, deadline.Format(time.TimeOnly))
	}
	runs, failed, unplanted, crashed := 0, 0, 0, 0
	for s := seed; time.Now().Before(deadline); s++ {
		runs++
		pr := chosen[s%uint64(len(chosen))]
		if !t.Run(fmt.Sprintf("seed=%d/%s", s, pr), func(t *testing.T) {
			defer func() {
				if t.Skipped() {
					unplanted++
				}
			}()
			crashed += checkRun(t, profileConfig(s, pr))
		}) {
			failed++
		}
	}
	t.Logf("%d runs from seed %d in %v, %d failed, %d requests crashed at fault points", runs, seed, budget, failed, crashed)
	if crashed == 0 && runs > 0 {
		t.Errorf("no request crashed at an injected fault point in %d runs: are the crashes still injected?", runs)
	}
	if unplanted > 0 {
		t.Logf("%d of them skipped: %s=%s rewrote nothing in them (neither caught nor missed)", unplanted, envPlant, os.Getenv(envPlant))
	}
}

// seedFromEnv returns MODELCHECK_SEED, or a fresh seed.
func seedFromEnv(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not a seed", envSeed, v)
		}
		return s
	}
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 16 // short enough to type
}

// checkRun runs one random history and fails t with the checker's report
// when the history breaks the contract. It returns how many requests
// crashed at an injected fault point.
func checkRun(t *testing.T, cfg runConfig) (crashed int) {
	start := time.Now()
	c := newChecker(t, cfg)
	if name := os.Getenv(envPlant); name != "" {
		pl, ok := plants[name]
		if !ok {
			t.Fatalf("%s=%q: no such plant", envPlant, name)
		}
		c.px.plant.Store(&pl)
	}
	c.plan(mrand.New(mrand.NewPCG(cfg.seed, 0)))
	if err := c.setup(t.Context()); err != nil {
		t.Fatalf("modelcheck: seed %d: %v", cfg.seed, err)
	}
	c.px.arm(schedule{
		span: cfg.history, outages: cfg.outages, rate: cfg.outageRate, background: cfg.background,
		// Delays around the lease make zombies; they stay under the SDK's
		// 2s attempt timeout.
		minDelay: cfg.lease / 3, maxDelay: min(cfg.lease+400*time.Millisecond, 1800*time.Millisecond),
		// Late writes land once another request has taken their key (a
		// check a second after the lease, recovery.DefaultMargin, then the
		// reconciler's settle at the earliest; seconds more when the
		// stream pollers idle), or else after 5.6-12s, which can be after
		// the request that sent one has answered.
		late: cfg.late, takenAfter: cfg.lease, minLate: cfg.lease + 5*time.Second, maxLate: 12 * time.Second,
	})
	if cfg.settling {
		stop := c.redeliver(t)
		from := c.now()
		c.runClients(t.Context())
		stop()
		t.Logf("modelcheck: payments settled %v after the history started, rewritten conditions %d", c.px.settledSince(from), c.px.planted.Load())
		defer func() {
			before, during, after, settled := c.notRefundableTimes()
			t.Logf("modelcheck: %s to refunds sent before their payment's first settlement was sent %d, while it was in flight %d, after it had landed %d (payments settled %d)",
				codeNotRefundable, before, during, after, settled)
		}()
	} else if cfg.bursts {
		c.runBursts(t.Context())
	} else {
		c.runClients(t.Context())
	}
	res := c.finish(t.Context())
	if tk := c.takeovers(); tk.tries > 0 {
		t.Logf("modelcheck: %v", tk)
	}
	if res.faults[faultThrottle]+res.faults[faultError]+res.faults[faultDrop]+res.faults[faultDelay]+res.faults[faultLate] == 0 {
		res.violations = append(res.violations, "the proxy injected no store fault: is it still in the stack's path?")
	}
	if res.crashCount() == 0 {
		// Every profile sends Once-Fault headers on requests that may
		// execute, but a short run of a profile whose requests mostly stop
		// before a fault point can see none by chance: the callers fail
		// when no run of theirs crashed at all.
		t.Logf("modelcheck: seed %d: no request crashed at an injected fault point (%s)", cfg.seed, res.crashes())
	}
	if name := os.Getenv(envPlant); name != "" && c.px.planted.Load() == 0 {
		// The plant never acted: the run says nothing about it, whether
		// it passed or not.
		if !res.ok() {
			t.Fatalf("modelcheck: %v\nthe plant %s rewrote nothing in this run: the failure is not the plant's", res, name)
		}
		t.Skipf("modelcheck: seed %d: the plant %s rewrote nothing in this run: neither caught nor missed (%v)", cfg.seed, name, res)
	}
	if !res.ok() {
		t.Fatalf("modelcheck: %v (the plant rewrote %d conditions or keys)", res, c.px.planted.Load())
	}
	t.Logf("modelcheck: %v; %v in all", res, time.Since(start).Round(100*time.Millisecond))
	return res.crashCount()
}

// scenarioConfig is the configuration of crafted schedules: a short lease
// and provider timeout, no random faults.
func scenarioConfig(seed uint64) runConfig {
	cfg := boundedConfig(seed)
	cfg.clients = 4
	cfg.lease = 400 * time.Millisecond
	cfg.providerTimeout = 200 * time.Millisecond
	cfg.quiet = 45 * time.Second
	return cfg
}

// TestPlantedUnfencedCompletion shows that the checker catches a completion
// that is not fenced on its lease token. The proxy rewrites the fenced
// completion's condition, #lease = :lease AND #status <> :completed, into
// (#lease = :lease OR :lease = :lease) AND #status <> :completed, and a
// crafted schedule makes a zombie complete over a newer owner:
//
//  1. Z sends v0 (a source the provider refuses: 422 provider_rejected,
//     nothing charged); its completion is held at the proxy;
//  2. its lease runs out; R retries v0, which hands the reservation to the
//     reconciler (409); the reconciler finds no charge and releases the key;
//  3. B sends v1 (tok_slow, charged, then 504) and reserves the key;
//  4. Z's completion, which Z gave up on at its CompletionTimeout but which
//     is on the wire, is let through. Fenced, it fails (the reconciler
//     completes v1 with its charge); unfenced, it overwrites B's
//     reservation: the key stores v0's answer while v1's charge exists.
//
// The unplanted run of the same schedule must pass, so that the failure is
// the plant's.
func TestPlantedUnfencedCompletion(t *testing.T) {
	plantedAndFenced(t, func(t *testing.T, planted bool) {
		res := unfencedCompletion(t, planted)
		switch {
		case planted && res.ok():
			t.Fatalf("the checker passed the planted bug: %v", res)
		case planted:
			text := res.String()
			for _, want := range []string{"not linearizable", "but the stored answer is v0's"} {
				if !strings.Contains(text, want) {
					t.Errorf("the report does not say %q:\n%s", want, text)
				}
			}
			t.Logf("the checker caught the planted bug:\n%v", res)
		case !res.ok():
			t.Fatalf("the checker failed the fenced schedule: %v", res)
		}
	})
}

func unfencedCompletion(t *testing.T, planted bool) *result {
	ctx := t.Context()
	c := newChecker(t, scenarioConfig(seedFromEnv(t)))
	if planted {
		pl := plants["unfenced-completion"]
		c.px.plant.Store(&pl)
	}
	p := c.twoCharges(t, "zombie-"+c.run, tokUnknown, tokSlow)
	completion := c.gatePut(p, idempotency.StatusCompleted, 10*time.Second)
	// Z gives its completion up after CompletionTimeout (half the lease
	// here), long before the gate opens; sent, it lands anyway, as a write on
	// the wire does.
	completion.applyLate = true
	r := func(i uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(c.cfg.seed, i)) }

	zombie := make(chan *op, 1)
	go func() { zombie <- c.send(ctx, 0, p, 0, "", r(1)) }()
	waitUntil(t, 10*time.Second, "the zombie's completion held at the proxy", func() bool { return completion.held.Load() > 0 })
	time.Sleep(c.cfg.lease)
	c.send(ctx, 1, p, 0, "", r(2))
	waitUntil(t, 20*time.Second, "the reconciler releasing the key", func() bool {
		_, found := c.record(ctx, p)
		return !found
	})
	owner := make(chan *op, 1)
	go func() { owner <- c.send(ctx, 2, p, 1, "", r(3)) }()
	waitUntil(t, 10*time.Second, "v1 reserving the key", func() bool {
		rec, found := c.record(ctx, p)
		tg, ok := tagInJSON(rec.Request)
		return found && ok && tg.variant == 1
	})
	completion.release()
	<-zombie
	<-owner
	res := c.finish(ctx)
	if planted && c.px.planted.Load() == 0 {
		t.Fatal("the proxy never rewrote a completion's condition")
	}
	return res
}

// TestPlantedUnfencedTakeover shows that the checker catches a takeover
// of an abandoned multi-step request that is not fenced on the abandoned
// lease token. The proxy rewrites the takeover's condition (see the plant
// unfenced-takeover), and a crafted schedule makes two retries race for one
// abandoned lease:
//
//  1. A sends an order (tok_visa) with a crash after its first recovery
//     point: its reservation stays IN_PROGRESS at order_created;
//  2. once its lease has run out, B and C retry at once; the proxy holds
//     their takeovers until both are held, then lets them through together.
//
// Fenced, one wins and resumes the order, the other is answered 409. Planted,
// both win: two owners of one lease at once. What they then do is
// idempotent (one owner per phase goes on, fenced on its recovery point and
// its own token), so the history, the final read and the audits pass; the
// checker must catch it by the proxy's count of winners per abandoned
// lease. The unplanted run of the same schedule must pass, so that the
// failure is the plant's.
func TestPlantedUnfencedTakeover(t *testing.T) {
	plantedAndFenced(t, func(t *testing.T, planted bool) {
		ctx := t.Context()
		c := newChecker(t, scenarioConfig(seedFromEnv(t)))
		if planted {
			pl := plants["unfenced-takeover"]
			c.px.plant.Store(&pl)
		}
		orders := endpointNamed(t, "orders")
		p := c.addPartition("acme", "takeover-"+c.run, variantSpec{orders, map[string]any{
			"amount": 1500, "currency": "EUR", "customer": "cus_1", "source": tokVisa, "email": "cus1@example.com",
		}})
		takeovers := newGate(10*time.Second, func(op string, req map[string]any) bool {
			_, _, ok := takeoverOf(op, req)
			return ok && itemKey(req) == p.pk
		})
		c.px.addGate(takeovers)
		r := func(i uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(c.cfg.seed, i)) }

		if o := c.send(ctx, 0, p, 0, orderFaults[0], r(1)); o.status != 502 || o.code != "function_failed" {
			t.Fatalf("crash after %s = %d %s, want API Gateway's 502 function_failed", orderFaults[0], o.status, o.body)
		}
		time.Sleep(c.cfg.lease + 50*time.Millisecond)
		retries := make(chan *op, 2)
		for i := range 2 {
			go func() { retries <- c.send(ctx, 1+i, p, 0, "", r(uint64(2+i))) }()
		}
		waitUntil(t, 10*time.Second, "two takeovers held at the proxy", func() bool { return takeovers.held.Load() >= 2 })
		takeovers.release()
		<-retries
		<-retries
		res := c.finish(ctx)
		tk := c.takeovers()
		t.Logf("modelcheck: %v", tk)
		switch {
		case planted && c.px.planted.Load() == 0:
			t.Fatal("the proxy never rewrote a takeover's condition")
		case planted && res.ok():
			t.Fatalf("the checker passed the planted bug (%v): %v", tk, res)
		case planted:
			if text := res.String(); !strings.Contains(text, "two takeovers won the same abandoned lease") {
				t.Errorf("the report does not name the two owners:\n%s", text)
			}
			t.Logf("the checker caught the planted bug:\n%v", res)
		case tk.won != 1:
			t.Fatalf("takeovers won = %d, want 1 (%v)", tk.won, tk)
		case !res.ok():
			t.Fatalf("the checker failed the fenced schedule: %v", res)
		}
	})
}

// TestAbandonedChargeKeepsItsKey is the regression test of a double charge
// the model check found: a charge that crashed after the provider charged
// leaves an IN_PROGRESS reservation, which the checker moves to UNKNOWN a
// second after its lease. When the check was late (delayed or failing), TTL
// deleted the reservation at its lease deadline, and until the sweeper
// restored it as UNKNOWN the key was free: a request with another body
// executed and charged too, and the first charge was never recorded. An
// External reservation's TTL was then moved a day past its lease; now it
// has no TTL attribute at all (a check lost and a day without a retry
// reopened the window): here, with DynamoDB Local's TTL on, the proxy
// holds the checker's and the sweeper's writes to UNKNOWN, as a late check
// would, and the other body gets 422 while the first charge waits for its
// reconciliation.
func TestAbandonedChargeKeepsItsKey(t *testing.T) {
	ctx := t.Context()
	cfg := scenarioConfig(seedFromEnv(t))
	cfg.lease, cfg.providerTimeout, cfg.ttl = time.Second, 500*time.Millisecond, true
	c := newChecker(t, cfg)
	p := c.twoCharges(t, "abandoned-"+c.run, tokVisa, tokVisa)
	toUnknown := newGate(time.Minute, func(op string, req map[string]any) bool {
		if itemKey(req) != p.pk {
			return false
		}
		values, _ := req["ExpressionAttributeValues"].(map[string]any)
		unknown, _ := values[":unknown"].(map[string]any)
		return op == "PutItem" && itemString(req, "status") == string(idempotency.StatusUnknown) ||
			op == "UpdateItem" && unknown["S"] == string(idempotency.StatusUnknown)
	})
	c.px.addGate(toUnknown)
	r := mrand.New(mrand.NewPCG(c.cfg.seed, 1))

	if o := c.send(ctx, 0, p, 0, fault.AfterProviderCall, r); o.status != 502 || o.code != "function_failed" {
		t.Fatalf("crash = %d %s, want API Gateway's 502 function_failed", o.status, o.body)
	}
	rec, found := c.record(ctx, p)
	if !found || rec.Status != idempotency.StatusInProgress || !rec.External {
		t.Fatalf("after the crash: %+v (found %v), want the External reservation", rec, found)
	}
	out, err := c.sys.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(c.sys.cfg.Table("IdempotencyTable")), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: p.pk}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ttl, ok := out.Item[dynamo.AttrExpiresAt]; ok {
		t.Errorf("the reservation's TTL attribute %s = %v, want none: DynamoDB's TTL must never free its key", dynamo.AttrExpiresAt, ttl)
	}
	waitUntil(t, 20*time.Second, "the lease running out and the check held", func() bool {
		return time.Now().After(rec.ExpiresAt.Add(2*time.Second)) && toUnknown.held.Load() > 0
	})
	if o := c.send(ctx, 1, p, 1, "", r); o.status != 422 {
		t.Errorf("another body under the key of an abandoned charge = %d %s, want 422", o.status, o.body)
	}
	toUnknown.release()
	if res := c.finish(ctx); !res.ok() {
		t.Errorf("modelcheck: %v", res)
	}
}

// twoCharges adds a key of acme with two charge variants, v0 of source0
// and v1 of source1.
func (c *checker) twoCharges(t *testing.T, key, source0, source1 string) *partition {
	charges := endpointNamed(t, "charges")
	return c.addPartition("acme", key,
		variantSpec{charges, map[string]any{"amount": 1500, "currency": "EUR", "customer": "cus_1", "source": source0}},
		variantSpec{charges, map[string]any{"amount": 2500, "currency": "EUR", "customer": "cus_1", "source": source1}})
}

// gatePut holds the PutItems that write p's record with status at the
// proxy until the gate is released.
func (c *checker) gatePut(p *partition, status idempotency.Status, maxHold time.Duration) *gate {
	g := newGate(maxHold, func(op string, req map[string]any) bool {
		return op == "PutItem" && itemKey(req) == p.pk && itemString(req, "status") == string(status)
	})
	c.px.addGate(g)
	return g
}

// TestLateProviderWriteAfterRelease is the regression test of a double
// charge the model check found: a provider applies a request it received
// even when its client has given up, so a look-up that finds no charge soon
// after the call proves nothing. The reconciler took "no charge" for final
// once the call's timeout had passed, released the key, and the charge
// landed after it: another request under the key charged too, and the first
// charge was never recorded. Now "nothing happened" is trusted only
// ONCE_PROVIDER_SETTLE after the record became UNKNOWN: here the proxy holds
// the simulator's write of the first charge for 5s, less than the settle
// time: by the time the reconciler trusts a look-up, the charge has landed
// or never will, and the key has one charge whatever the other body does.
func TestLateProviderWriteAfterRelease(t *testing.T) {
	ctx := t.Context()
	cfg := scenarioConfig(seedFromEnv(t))
	cfg.providerSettle = 8 * time.Second
	c := newChecker(t, cfg)
	p := c.twoCharges(t, "late-"+c.run, tokVisa, tokVisa)
	v0 := p.variants[0].tag
	write := newGate(5*time.Second, func(op string, req map[string]any) bool {
		if op != "TransactWriteItems" {
			return false
		}
		items, _ := req["TransactItems"].([]any)
		for _, it := range items {
			put, _ := it.(map[string]any)["Put"].(map[string]any)
			item, _ := put["Item"].(map[string]any)
			md, _ := item["metadata"].(map[string]any)
			m, _ := md["M"].(map[string]any)
			run, _ := m[metaRun].(map[string]any)
			key, _ := m[metaKey].(map[string]any)
			variant, _ := m[metaVariant].(map[string]any)
			if run["S"] == v0.run && key["S"] == v0.key && variant["S"] == "0" {
				return true
			}
		}
		return false
	})
	write.applyLate = true
	c.px.addGate(write)
	r := mrand.New(mrand.NewPCG(c.cfg.seed, 1))

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack log: %s", c.writeFile("stack.log", []byte(c.out.String())))
		}
	})
	if o := c.send(ctx, 0, p, 0, "", r); o.status != 504 {
		t.Fatalf("v0 = %d %s, want 504 (the provider's write is held)", o.status, o.body)
	}
	waitUntil(t, 30*time.Second, "the reconciler settling v0 (completed with its charge, or released)", func() bool {
		rec, found := c.record(ctx, p)
		return !found || rec.Status == idempotency.StatusCompleted
	})
	// Only now may another body run: if v0's charge landed, the key answers
	// v0's; if it did not, v1 charges. Either way one charge (finish checks).
	if o := c.send(ctx, 1, p, 1, "", r); o.status != 201 && o.status != 422 {
		t.Errorf("v1 after v0 was settled = %d %s, want 201 (v0 charged nothing) or 422 (it did)", o.status, o.body)
	}
	write.release() // a charge still held lands now, before the final read
	if res := c.finish(ctx); !res.ok() {
		t.Errorf("modelcheck: %v", res)
	}
}

// record reads p's record directly from DynamoDB Local.
func (c *checker) record(ctx context.Context, p *partition) (idempotency.Record, bool) {
	out, err := c.sys.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(c.sys.cfg.Table("IdempotencyTable")),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: p.pk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil || len(out.Item) == 0 {
		return idempotency.Record{}, false
	}
	rec, err := dynamo.RecordFromItem(out.Item)
	if err != nil {
		c.t.Errorf("record %s: %v", p, err)
		return idempotency.Record{}, false
	}
	return rec, true
}

func endpointNamed(t *testing.T, name string) *endpoint {
	t.Helper()
	for _, ep := range endpoints {
		if ep.name == name {
			return ep
		}
	}
	t.Fatalf("no endpoint %q", name)
	return nil
}

// waitUntil polls cond every 10ms until it holds, failing t after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		if err := t.Context().Err(); err != nil {
			t.Fatal(errors.Join(errors.New("waiting for "+what), err))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPlantedRefundOverHold shows that the checker catches a refund whose
// hold does not check what is left of the payment. The proxy rewrites the
// hold's condition, #refundable >= :amount, into one that always holds; two
// refunds of different keys then take 1500 each of one payment of 2100:
// fenced, the second is refused by its hold (400 amount_exceeds_refundable,
// stored); planted, it reaches the provider, which refuses it (422
// provider_rejected), an answer the refunds endpoint must never give. The
// unplanted run of the same schedule must pass, so that the failure is the
// plant's.
func TestPlantedRefundOverHold(t *testing.T) {
	plantedAndFenced(t, func(t *testing.T, planted bool) {
		ctx := t.Context()
		// A sequential schedule: nothing depends on a lease running out,
		// so the provider has all the time a loaded machine may take (the
		// first refund got 504 at load 8 with the scenarios' 200ms).
		cfg := scenarioConfig(seedFromEnv(t))
		cfg.lease, cfg.providerTimeout = 10*time.Second, 5*time.Second
		c := newChecker(t, cfg)
		if planted {
			pl := plants["refund-over-hold"]
			c.px.plant.Store(&pl)
		}
		refunds := endpointNamed(t, "refunds")
		first := c.addPartition("acme", "first-"+c.run, variantSpec{refunds, map[string]any{"payment": tokVisa, "amount": 1500}})
		second := c.addPartition("acme", "second-"+c.run, variantSpec{refunds, map[string]any{"payment": tokVisa, "amount": 1500}})
		if err := c.setup(ctx); err != nil {
			t.Fatal(err)
		}
		if first.variants[0].body["payment"] != second.variants[0].body["payment"] {
			t.Fatalf("the refunds name payments %v and %v, want one", first.variants[0].body["payment"], second.variants[0].body["payment"])
		}
		r := mrand.New(mrand.NewPCG(c.cfg.seed, 1))
		if o := c.send(ctx, 0, first, 0, "", r); o.status != 201 {
			t.Fatalf("the first refund = %d %s, want 201", o.status, o.body)
		}
		o := c.send(ctx, 1, second, 0, "", r)
		res := c.finish(ctx)
		switch {
		case planted && c.px.planted.Load() == 0:
			t.Fatal("the proxy never rewrote a hold's condition")
		case planted && res.ok():
			t.Fatalf("the checker passed the planted bug (the second refund = %d %s): %v", o.status, o.body, res)
		case planted:
			if text := res.String(); !strings.Contains(text, "unexpected answer 422 provider_rejected") {
				t.Errorf("the report does not name the provider's refusal:\n%s", text)
			}
			t.Logf("the checker caught the planted bug:\n%v", res)
		case o.status != 400 || o.code != "amount_exceeds_refundable":
			t.Fatalf("the second refund = %d %s, want 400 amount_exceeds_refundable", o.status, o.body)
		case !res.ok():
			t.Fatalf("the checker failed the fenced schedule: %v", res)
		}
	})
}

// plantedAndFenced runs a crafted schedule twice: with its plant (the
// subtest "planted") and without (the subtest "fenced").
func plantedAndFenced(t *testing.T, run func(t *testing.T, planted bool)) {
	for _, planted := range []bool{true, false} {
		name := "fenced"
		if planted {
			name = "planted"
		}
		t.Run(name, func(t *testing.T) { run(t, planted) })
	}
}
