package deploytest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/samtemplate"
)

// TestLeaseOutlastsFunction checks that every function that runs the
// idempotency engine (its code reaches idempotency.New) holds its
// reservations longer than it can run: its lease (ONCE_LEASE as the
// template sets it with the parameters' defaults, else config.DefaultLease)
// exceeds its Timeout (its own, the globals', or Lambda's 3 s) by
// idempotency.LeaseMargin. A shorter lease can run out while a request still
// runs, and a retry would take its key over and execute it a second time.
func TestLeaseOutlastsFunction(t *testing.T) {
	tm := template(t)
	engine := map[string]bool{}
	for _, folder := range functionFolders(t) {
		if scanFunction(t, folder).Qualified[modulePath(t)+"/idempotency.New"] {
			engine[samtemplate.FunctionLogicalID(folder)] = true
		}
	}
	if !engine["ApiFunction"] {
		t.Fatalf("engine functions %v: the scan no longer finds ApiFunction's idempotency.New", slices.Sorted(maps.Keys(engine)))
	}
	fns := tm.Functions()
	for _, p := range leaseProblems(fns, engine, tm.ParameterDefaults()) {
		t.Error(p)
	}

	// The check itself, on ApiFunction with a timeout the lease does not
	// outlast, and with one it outlasts by less than the margin.
	lease := config.DefaultLease
	for _, timeout := range []time.Duration{2 * lease, lease - idempotency.LeaseMargin/2} {
		api := fns["ApiFunction"]
		props := maps.Clone(api.Properties)
		props["Timeout"] = int(timeout / time.Second)
		if timeout%time.Second != 0 {
			props["Timeout"] = timeout.Seconds()
		}
		api.Properties = props
		got := leaseProblems(map[string]samtemplate.Function{"ApiFunction": api}, engine, tm.ParameterDefaults())
		if len(got) != 1 || !strings.Contains(got[0], "ApiFunction") {
			t.Errorf("ApiFunction with Timeout %v: problems %q, want one naming ApiFunction", timeout, got)
		}
	}
}

// leaseProblems says, for each function of fns in engine whose lease does
// not outlast its timeout by idempotency.LeaseMargin, why.
func leaseProblems(fns map[string]samtemplate.Function, engine map[string]bool, vars map[string]string) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(fns)) {
		if !engine[id] {
			continue
		}
		fn := fns[id]
		timeout, err := functionTimeout(fn, vars)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		lease, source := config.DefaultLease, "config.DefaultLease"
		if v, ok := fn.Environment()[config.EnvLease]; ok {
			s, err := samtemplate.String(v, vars)
			if err == nil {
				lease, err = time.ParseDuration(s)
			}
			if err != nil {
				out = append(out, fmt.Sprintf("%s %s: %v", id, config.EnvLease, err))
				continue
			}
			source = config.EnvLease
		}
		if lease <= timeout+idempotency.LeaseMargin {
			out = append(out, fmt.Sprintf("%s: lease %v (%s) does not outlast its Timeout %v by idempotency.LeaseMargin (%v): "+
				"a request still running when its lease runs out is taken over by a retry and executed twice; raise the lease or lower the Timeout",
				id, lease, source, timeout, idempotency.LeaseMargin))
		}
	}
	return out
}
