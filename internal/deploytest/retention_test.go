package deploytest

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/samtemplate"
)

// TestRetentionBoundsNamed holds the Retention parameter's description to
// what the functions do with it: for each bound it names (under 1h, under
// Lease, under ProviderSettle), the functions it lists are exactly those
// whose environment in the template, with the parameters set to break that
// bound and nothing else, config.FromEnv refuses.
func TestRetentionBoundsNamed(t *testing.T) {
	params := template(t).Section("Parameters")
	desc, _ := mapOf(params["Retention"])["Description"].(string)
	desc = strings.Join(strings.Fields(desc), " ")
	cases := []struct {
		bound string
		set   map[string]string // parameter values; the others keep their defaults
	}{
		{bound: "1h", set: map[string]string{"Retention": "59m"}},
		{bound: "Lease", set: map[string]string{"Lease": "2h", "Retention": "90m"}},
		{bound: "ProviderSettle", set: map[string]string{"ProviderSettle": "2h", "Retention": "90m"}},
	}
	for _, c := range cases {
		t.Run(c.bound, func(t *testing.T) {
			m := regexp.MustCompile(`under ` + regexp.QuoteMeta(c.bound) + `: ([a-z, ]+?)(?:;|\))`).FindStringSubmatch(desc)
			if m == nil {
				t.Fatalf("the Retention parameter's description names no functions refusing a Retention under %s: %q", c.bound, desc)
			}
			var named []string
			for _, f := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' }) {
				if f != "and" {
					named = append(named, f)
				}
			}
			slices.Sort(named)
			var refused []string
			for id, fn := range template(t).Functions() {
				env := fn.Environment()
				if _, ok := env[config.EnvRetention]; !ok {
					continue
				}
				vars := durations(t, params, env, c.set)
				if _, err := config.FromEnv(func(k string) string { return vars[k] }); err != nil {
					refused = append(refused, samtemplate.FunctionFolder(id))
				}
			}
			slices.Sort(refused)
			if !slices.Equal(named, refused) {
				t.Errorf("a Retention under %s: the description names %v, config.FromEnv refuses the environments of %v", c.bound, named, refused)
			}
		})
	}
}

// durations resolves the duration variables config.FromEnv checks against
// each other in env (a function's environment): a parameter's value from
// set, else its default. The others do not take part in those checks.
func durations(t *testing.T, params map[string]any, env map[string]any, set map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range []string{config.EnvRetention, config.EnvLease, config.EnvProviderSettle, config.EnvProviderTimeout} {
		raw, ok := env[v]
		if !ok {
			continue
		}
		ref, _ := mapOf(raw)["Ref"].(string)
		if ref == "" {
			t.Fatalf("%s = %v: want a !Ref to a parameter", v, raw)
		}
		if val, ok := set[ref]; ok {
			out[v] = val
			continue
		}
		def, ok := mapOf(params[ref])["Default"].(string)
		if !ok {
			t.Fatalf("parameter %s has no string Default", ref)
		}
		out[v] = def
	}
	return out
}
