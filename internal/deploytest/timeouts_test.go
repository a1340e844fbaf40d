package deploytest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/samtemplate"
)

// lambdaDefaultTimeout is a function's timeout when neither it nor the
// globals set one (AWS::Lambda::Function Timeout: 3 seconds).
const lambdaDefaultTimeout = 3 * time.Second

// functionTimeout is fn's Timeout (its own, the globals', or Lambda's 3 s)
// with the template's parameters set to vars.
func functionTimeout(fn samtemplate.Function, vars map[string]string) (time.Duration, error) {
	v, ok := fn.Properties["Timeout"]
	if !ok {
		return lambdaDefaultTimeout, nil
	}
	s, err := samtemplate.String(v, vars)
	if err != nil {
		return 0, fmt.Errorf("%s Timeout: %w", fn.LogicalID, err)
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s Timeout %q: %w", fn.LogicalID, s, err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// withTimeout is fn with its Timeout set to seconds.
func withTimeout(fn samtemplate.Function, seconds int) samtemplate.Function {
	fn.Properties = maps.Clone(fn.Properties)
	fn.Properties["Timeout"] = seconds
	return fn
}

// TestReceiptClaimOutlastsFunction checks that every function that sends
// receipts (its code reaches receipts.Handler, RetryHandler or New:
// ReceiptsFunction and ResenderFunction) runs no longer than a claim holds a job
// (receipts.DefaultClaimFor, which they use): a claim that runs out while
// its attempt still sends lets another attempt claim the job and send the
// receipt a second time (see internal/receipts).
func TestReceiptClaimOutlastsFunction(t *testing.T) {
	tm := template(t)
	senders := map[string]bool{}
	for _, folder := range functionFolders(t) {
		q := scanFunction(t, folder).Qualified
		if q[modulePath(t)+"/internal/receipts.Handler"] || q[modulePath(t)+"/internal/receipts.RetryHandler"] || q[modulePath(t)+"/internal/receipts.New"] {
			senders[samtemplate.FunctionLogicalID(folder)] = true
		}
	}
	if got := slices.Sorted(maps.Keys(senders)); !slices.Contains(got, "ReceiptsFunction") || !slices.Contains(got, "ResenderFunction") {
		t.Fatalf("functions reaching receipts' senders %v: the scan no longer finds ReceiptsFunction and ResenderFunction", got)
	}
	fns, vars := tm.Functions(), tm.ParameterDefaults()
	for _, p := range claimProblems(fns, senders, vars) {
		t.Error(p)
	}

	// The check itself, on each with its Timeout a second over the claim.
	over := int(receipts.DefaultClaimFor/time.Second) + 1
	for id := range senders {
		got := claimProblems(map[string]samtemplate.Function{id: withTimeout(fns[id], over)}, senders, vars)
		if len(got) != 1 || !strings.Contains(got[0], id) {
			t.Errorf("%s with Timeout %d: problems %q, want one naming %s", id, over, got, id)
		}
	}
}

// claimProblems says, for each function of fns in senders whose Timeout is
// over receipts.DefaultClaimFor, why.
func claimProblems(fns map[string]samtemplate.Function, senders map[string]bool, vars map[string]string) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(fns)) {
		if !senders[id] {
			continue
		}
		timeout, err := functionTimeout(fns[id], vars)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if timeout > receipts.DefaultClaimFor {
			out = append(out, fmt.Sprintf("%s: Timeout %v is over receipts.DefaultClaimFor (%v): a claim can run out while its attempt still sends, "+
				"and another attempt sends the receipt again; lower the Timeout or claim for longer", id, timeout, receipts.DefaultClaimFor))
		}
	}
	return out
}

// TestReconcilerSettleFitsInvocation checks that, with the template's
// defaults, the reconciler resolves a record that found nothing at the
// provider within one invocation: ReconcilerFunction's Timeout exceeds
// ONCE_PROVIDER_SETTLE plus its ResolveTime (reconciler.ResolveTime:
// ONCE_PROVIDER_TIMEOUT plus the store client's worst case for each of the
// DynamoDB calls of a resolution, an order's read before its charge
// included: 30 s + 5 s + 3 x 6.4 s = 54.2 s with the defaults). A longer
// settle is carried over the mapping's retries, each delivery waiting
// until its deadline less ResolveTime; past about (MaximumRetryAttempts + 1) x (Timeout -
// ResolveTime) the records go to the on-failure queue and the key stays
// UNKNOWN until a redrive.
func TestReconcilerSettleFitsInvocation(t *testing.T) {
	tm := template(t)
	fn, ok := tm.Functions()["ReconcilerFunction"]
	if !ok {
		t.Fatal("no ReconcilerFunction")
	}
	vars := tm.ParameterDefaults()
	if p := settleProblem(fn, vars); p != "" {
		t.Error(p)
	}

	// The check itself: a settle of the whole Timeout, and the default
	// settle with a Timeout of the settle alone.
	timeout, err := functionTimeout(fn, vars)
	if err != nil {
		t.Fatal(err)
	}
	long := maps.Clone(vars)
	long["ProviderSettle"] = timeout.String()
	if p := settleProblem(fn, long); !strings.Contains(p, "ReconcilerFunction") {
		t.Errorf("ProviderSettle %v: problem %q, want one naming ReconcilerFunction", timeout, p)
	}
	settle, err := time.ParseDuration(vars["ProviderSettle"])
	if err != nil {
		t.Fatal(err)
	}
	if p := settleProblem(withTimeout(fn, int(settle/time.Second)), vars); !strings.Contains(p, "ReconcilerFunction") {
		t.Errorf("Timeout %v: problem %q, want one naming ReconcilerFunction", settle, p)
	}
}

// settleProblem says why fn, the reconciler, cannot wait out its
// ONCE_PROVIDER_SETTLE within one invocation with the parameters set to
// vars; "" when it can.
func settleProblem(fn samtemplate.Function, vars map[string]string) string {
	timeout, err := functionTimeout(fn, vars)
	if err != nil {
		return err.Error()
	}
	durations := map[string]time.Duration{}
	for name, def := range map[string]time.Duration{config.EnvProviderTimeout: config.DefaultProviderTimeout, config.EnvProviderSettle: config.DefaultProviderSettle} {
		durations[name] = def
		if v, ok := fn.Environment()[name]; ok {
			s, err := samtemplate.String(v, vars)
			if err == nil {
				durations[name], err = time.ParseDuration(s)
			}
			if err != nil {
				return fmt.Sprintf("%s %s: %v", fn.LogicalID, name, err)
			}
		}
	}
	settle := durations[config.EnvProviderSettle]
	resolve := reconciler.ResolveTime(config.Config{ProviderTimeout: durations[config.EnvProviderTimeout]})
	if settle+resolve < timeout {
		return ""
	}
	retries := 0
	for _, ev := range fn.Events() {
		if n, ok := ev.Properties["MaximumRetryAttempts"].(int); ok {
			retries = n
		}
	}
	return fmt.Sprintf("%s: %s %v plus its ResolveTime %v (%s + reconciler.ResolveStoreCalls x reconciler.StoreCallBound: "+
		"a provider call, and the DynamoDB calls of an order's resolution, its read before the charge included) is not under its Timeout %v: "+
		"a record that finds nothing at the provider is not resolved within one invocation but deferred over the stream's retries "+
		"(about %v in all with MaximumRetryAttempts %d), past which it goes to the on-failure queue and its key stays UNKNOWN until a redrive; "+
		"raise the Timeout or lower the settle", fn.LogicalID, config.EnvProviderSettle, settle, resolve, config.EnvProviderTimeout, timeout,
		time.Duration(retries+1)*max(timeout-resolve, 0), retries)
}
