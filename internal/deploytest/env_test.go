package deploytest

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/samtemplate"
)

// faultEnv enables crash injection: never part of a deployment.
const faultEnv = "ONCE_FAULT_INJECTION"

// notFromTemplate reports whether a variable is set by Lambda itself (AWS_*),
// never by the template.
func notFromTemplate(name string) bool {
	return strings.HasPrefix(name, "AWS_") || strings.HasPrefix(name, "_")
}

// TestEnvironmentSources derives what each variable must be set from, by
// the variable's name, and checks every function's environment against it:
//
//   - a table's variable (config.TableEnv of its logical ID:
//     ONCE_API_KEYS_TABLE) is !Ref of that table;
//   - any other !Ref names a queue (ONCE_CHECK_QUEUE: CheckQueue) or a
//     parameter (ONCE_PROVIDER_TIMEOUT: ProviderTimeout, LOG_LEVEL:
//     LogLevel) whose name is the variable's, ONCE_ and underscores
//     dropped, in any case;
//   - ONCE_<X>_URL is the simulator's function URL in a demo stack, else the
//     parameter <X>Url (envURL), and ONCE_<X>_AUTH aws_iam in a demo stack
//     (its function URL takes signed calls only), else none (envAuth).
//
// Nothing else is allowed, so a new variable needs a source of one of these
// kinds.
func TestEnvironmentSources(t *testing.T) {
	tm := template(t)
	resources := tm.Resources()
	params := tm.Section("Parameters")
	for _, id := range sortedKeys(tm.Functions()) {
		for name, v := range tm.Functions()[id].Environment() {
			if want, ok := envSource(name, v, resources, params); !ok {
				t.Errorf("%s %s = %v: no rule derives its source (see TestEnvironmentSources)", id, name, v)
			} else if diff := cmp.Diff(want, v); diff != "" {
				t.Errorf("%s %s value mismatch (-want +got):\n%s", id, name, diff)
			}
		}
	}
}

// envSource returns what the variable name must be set from, given its
// value v, and whether any rule applies.
func envSource(name string, v any, resources map[string]samtemplate.Resource, params map[string]any) (any, bool) {
	for id, r := range resources {
		if r.Type == "AWS::DynamoDB::Table" && config.TableEnv(id) == name {
			return map[string]any{"Ref": id}, true
		}
	}
	if strings.HasSuffix(name, "_TABLE") {
		return nil, false // a table's variable, but no table of the template has it
	}
	if strings.HasPrefix(name, "ONCE_") && strings.HasSuffix(name, "_URL") {
		if param := paramFor(name, params); param != "" {
			return envURL(param), true
		}
	}
	if strings.HasPrefix(name, "ONCE_") && strings.HasSuffix(name, "_AUTH") {
		return envAuth, true
	}
	ref, _ := mapOf(v)["Ref"].(string)
	if ref == "" || len(mapOf(v)) != 1 || !sameName(name, ref) {
		return nil, false
	}
	if params[ref] != nil || resources[ref].Type == "AWS::SQS::Queue" {
		return map[string]any{"Ref": ref}, true
	}
	return nil, false
}

// envAuth is how the functions authenticate to the simulator's function URL:
// signed (aws_iam) in a demo stack, as its AuthType AWS_IAM requires.
var envAuth = map[string]any{"Fn::If": []any{"DeployProvider", "aws_iam", "none"}}

// envURL is a URL variable's source: the simulator's function URL in a demo
// stack, else the parameter param.
func envURL(param string) any {
	return map[string]any{"Fn::If": []any{
		"DeployProvider",
		map[string]any{"Fn::GetAtt": []any{"ProviderFunctionUrl", "FunctionUrl"}},
		map[string]any{"Ref": param},
	}}
}

// paramFor returns the parameter named like the variable name, "" if none.
func paramFor(name string, params map[string]any) string {
	for p := range params {
		if sameName(name, p) {
			return p
		}
	}
	return ""
}

// sameName reports whether a variable and a logical ID or parameter name
// are the same words: ONCE_ and underscores dropped, in any case
// (ONCE_WORKER_RETRY_QUEUE and WorkerRetryQueue, DYNAMODB_ENDPOINT and
// DynamoDBEndpoint).
func sameName(variable, name string) bool {
	v := strings.ReplaceAll(strings.TrimPrefix(variable, "ONCE_"), "_", "")
	return strings.EqualFold(v, name)
}

func TestFaultInjectionNeverSettable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), faultEnv) || regexp.MustCompile(`(?i)fault[_ -]?injection|once-fault`).Match(data) {
		t.Errorf("template.yaml mentions fault injection; %s must never be set in a deployment", faultEnv)
	}
}

// TestEnvironmentCoversCode checks that every variable the code reachable
// from functions/<name> reads is set for its function, and that the
// template sets no other: the names passed to getenv-like calls; for the
// fields of config.Config the function uses, the config.Env<Field> variable
// that FromEnv reads into them; for each table the code names
// (cfg.Table("PaymentsTable")), the table's variable (config.TableEnv); and
// the partners FromEnv's cross-checks require of those (addCheckedPartners).
func TestEnvironmentCoversCode(t *testing.T) {
	fieldEnv := configFieldEnv(t)
	for id, fn := range template(t).Functions() {
		folder := samtemplate.FunctionFolder(id)
		if !hasFolder(t, folder) {
			t.Errorf("%s: functions/%s does not exist", id, folder)
			continue
		}
		s := scanFunction(t, folder)
		reads := map[string]string{} // variable -> why
		for v := range s.Getenv {
			reads[v] = "getenv"
		}
		for id := range s.Tables {
			reads[config.TableEnv(id)] = fmt.Sprintf("config.Table(%q)", id)
		}
		for _, u := range s.Unresolved {
			t.Errorf("%s: %s: name the table with a constant logical ID, cfg.Table(\"PaymentsTable\"), so that the checks can tell which variable it reads", id, u)
		}
		for field, v := range fieldEnv {
			if s.Selected[field] {
				reads[v] = "config." + field
			}
		}
		addCheckedPartners(reads)
		env := fn.Environment()
		if _, ok := reads[faultEnv]; ok && id != "ApiFunction" {
			t.Errorf("%s reads %s (%s); only the api has crash injection", id, faultEnv, reads[faultEnv])
		}
		for _, v := range unset(env, reads) {
			t.Errorf("%s reads %s (%s) but template.yaml does not set it", id, v, reads[v])
		}
		var unread []string
		for v := range env {
			if _, ok := reads[v]; !ok {
				unread = append(unread, v)
			}
		}
		if len(unread) > 0 {
			sort.Strings(unread)
			t.Errorf("%s: template.yaml sets %v, which its code never reads", id, unread)
		}
	}
}

// unset returns the variables of reads that env (a function's
// environment in the template) does not set, but for Lambda's own and the
// fault injection's.
func unset(env map[string]any, reads map[string]string) []string {
	var out []string
	for _, v := range sortedKeys(reads) {
		if !notFromTemplate(v) && v != faultEnv && env[v] == nil {
			out = append(out, v)
		}
	}
	return out
}

// configFieldEnv maps each config.Config field to the variable it is read
// from, by the convention const Env<Field> = "VARIABLE", which it checks.
func configFieldEnv(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(root(t), "internal", "config")
	consts := stringConsts(t, dir, regexp.MustCompile(`^Env[A-Z]`))
	fields := map[string]bool{}
	for _, f := range structFields(t, dir, "Config") {
		fields[f] = true
	}
	out := map[string]string{}
	for name, v := range consts {
		field := strings.TrimPrefix(name, "Env")
		if !fields[field] {
			t.Errorf("config.%s = %q has no Config.%s field: keep the Env<Field> convention, which this test relies on", name, v, field)
			continue
		}
		out[field] = v
	}
	return out
}

// crossChecks are config.FromEnv's checks of one variable against another
// (TestCrossChecks holds this list to FromEnv).
var crossChecks = []struct {
	checked, against string
	// bad is a value of checked that FromEnv refuses against against's
	// default, good a value of against that makes it valid.
	bad, good string
	// also is set with both (a third variable that bad needs anyway: a
	// lease over the default retention is over the default key retention's
	// floor too).
	also map[string]string
}{
	{checked: config.EnvProviderTimeout, against: config.EnvLease, bad: config.DefaultLease.String(), good: (2 * config.DefaultLease).String()},
	{checked: config.EnvLease, against: config.EnvRetention, bad: (config.DefaultRetention + time.Hour).String(), good: (2 * config.DefaultRetention).String(),
		also: map[string]string{config.EnvProviderKeyRetention: (2 * config.DefaultRetention).String()}},
	{checked: config.EnvProviderSettle, against: config.EnvRetention, bad: (config.DefaultRetention + time.Hour).String(), good: (2 * config.DefaultRetention).String(),
		also: map[string]string{config.EnvProviderKeyRetention: (2 * config.DefaultRetention).String()}},
	{checked: config.EnvProviderSettle, against: config.EnvProviderTimeout, bad: (config.DefaultProviderTimeout / 2).String(), good: (config.DefaultProviderTimeout / 4).String()},
	// A key retention a minute under its floor with the defaults, valid
	// with a lease (above the 5s timeout) or a settle (at it) shorter than
	// theirs.
	{checked: config.EnvProviderKeyRetention, against: config.EnvLease, bad: "2h0m59s", good: "6s"},
	{checked: config.EnvProviderKeyRetention, against: config.EnvProviderSettle, bad: "2h0m59s", good: "5s"},
}

// addCheckedPartners adds to reads (variable -> why) the variables a
// function must get because of FromEnv's cross-checks, until none adds one.
// FromEnv parses and checks every variable, whatever the function uses, and
// takes an unset one's default: a function that gets one side of a check
// and not the other compares a deployed value with a default the deployment
// may have changed. Whether that can fail is decided by FromEnv itself
// (needsPartner), for each side: a function that gets ONCE_LEASE needs
// ONCE_PROVIDER_TIMEOUT (a Lease of 4s, deployed with a timeout of 1s,
// fails against the 5s default) and ONCE_RETENTION (a Lease of 25h, with a
// Retention of 48h, against the 24h default); one that gets ONCE_RETENTION
// alone needs neither (every accepted Retention is at least 1h, above the
// defaults of ONCE_LEASE and ONCE_PROVIDER_SETTLE). A variable added for a
// check is checked in turn.
func addCheckedPartners(reads map[string]string) {
	for added := true; added; {
		added = false
		for _, c := range crossChecks {
			for _, pair := range [][2]string{{c.checked, c.against}, {c.against, c.checked}} {
				if _, ok := reads[pair[0]]; !ok {
					continue
				}
				if _, ok := reads[pair[1]]; ok || !needsPartner(pair[0], pair[1]) {
					continue
				}
				reads[pair[1]] = "config.FromEnv checks " + pair[0] + " against " + pair[1] + ", whose default a deployment may change"
				added = true
			}
		}
	}
}

// checkDurations are the values needsPartner tries: around the defaults,
// the floors and each other.
var checkDurations = []string{
	"1ms", "500ms", "1s", "2s", "4s", "5s", "6s", "10s", "29s", "30s", "31s", "45s",
	"1m", "2m", "59m", "1h", "2h", "23h", "24h", "25h", "48h", "1000h",
}

// needsPartner reports whether a function that gets the variable set but
// not partner can fail at start-up in a valid deployment: whether some
// values of the two that config.FromEnv accepts together are refused with
// partner left to its default.
func needsPartner(set, partner string) bool {
	partnersMu.Lock()
	defer partnersMu.Unlock()
	k := [2]string{set, partner}
	if v, ok := partners[k]; ok {
		return v
	}
	partners[k] = findsPartnerNeeded(set, partner)
	return partners[k]
}

// partners memoizes needsPartner.
var (
	partnersMu sync.Mutex
	partners   = map[[2]string]bool{}
)

// findsPartnerNeeded is needsPartner's search: over the values of the two
// alone, then with a third variable of crossChecks set as well (a Lease of
// 25h needs a Retention above the default, but is refused with it alone:
// it needs a ProviderKeyRetention above the default as well).
func findsPartnerNeeded(set, partner string) bool {
	thirds := []string{""}
	for _, c := range crossChecks {
		for _, v := range []string{c.checked, c.against} {
			if v != set && v != partner && !slices.Contains(thirds, v) {
				thirds = append(thirds, v)
			}
		}
	}
	for _, third := range thirds {
		values := []string{""}
		if third != "" {
			values = checkDurations
		}
		for _, c := range values {
			if third != "" {
				// The third's value must be valid alone: the refusal is
				// then set's, in its company.
				if _, err := config.FromEnv(func(k string) string { return map[string]string{third: c}[k] }); err != nil {
					continue
				}
			}
			for _, a := range checkDurations {
				alone := map[string]string{set: a}
				if third != "" {
					alone[third] = c
				}
				if _, err := config.FromEnv(func(k string) string { return alone[k] }); err == nil {
					continue
				}
				for _, b := range checkDurations {
					both := maps.Clone(alone)
					both[partner] = b
					if _, err := config.FromEnv(func(k string) string { return both[k] }); err == nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// TestCheckedPartners: what addCheckedPartners requires of a function that
// reads only the variables given, and that a real missing pair is caught:
// each case's variables less one that it requires fail the check.
func TestCheckedPartners(t *testing.T) {
	tests := []struct {
		reads []string
		want  []string // reads and what they require
	}{
		{reads: nil, want: nil},
		{reads: []string{config.EnvRetention}, want: []string{config.EnvRetention}},
		{reads: []string{config.EnvProviderKeyRetention}, want: []string{config.EnvProviderKeyRetention}},
		{reads: []string{config.EnvLease},
			want: []string{config.EnvLease, config.EnvProviderKeyRetention, config.EnvProviderTimeout, config.EnvRetention}},
		{reads: []string{config.EnvProviderTimeout},
			want: []string{config.EnvLease, config.EnvProviderKeyRetention, config.EnvProviderTimeout, config.EnvRetention}},
		{reads: []string{config.EnvProviderSettle},
			want: []string{config.EnvLease, config.EnvProviderKeyRetention, config.EnvProviderSettle, config.EnvProviderTimeout, config.EnvRetention}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.reads, ","), func(t *testing.T) {
			reads := map[string]string{}
			for _, v := range tt.reads {
				reads[v] = "test"
			}
			addCheckedPartners(reads)
			if diff := cmp.Diff(tt.want, sortedKeys(reads), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("addCheckedPartners(%v) mismatch (-want +got):\n%s", tt.reads, diff)
			}
			for _, missing := range tt.want {
				env := map[string]any{}
				for _, v := range tt.want {
					if v != missing {
						env[v] = map[string]any{"Ref": "X"}
					}
				}
				if got := unset(env, reads); !cmp.Equal(got, []string{missing}) {
					t.Errorf("an environment of %v without %s: unset = %v, want [%s]", tt.want, missing, got, missing)
				}
			}
		})
	}
	// The worker's environment in template.yaml, ONCE_LEASE taken out (it
	// never uses the lease): caught, because it gets ONCE_PROVIDER_TIMEOUT.
	worker := maps.Clone(template(t).Functions()["WorkerFunction"].Environment())
	delete(worker, config.EnvLease)
	reads := map[string]string{}
	for f := range scanFunction(t, "worker").Selected {
		if v, ok := configFieldEnv(t)[f]; ok {
			reads[v] = "config." + f
		}
	}
	if _, ok := reads[config.EnvLease]; ok {
		t.Fatalf("the worker uses config.Lease; pick a variable it does not use")
	}
	addCheckedPartners(reads)
	if got := unset(worker, reads); !cmp.Equal(got, []string{config.EnvLease}) {
		t.Errorf("WorkerFunction without %s: unset = %v, want [%s]", config.EnvLease, got, config.EnvLease)
	}
	// The pairs needsPartner finds, one way or both (the 4s lease and 1s
	// timeout of cc90acd, which failed the sweeper and checker, is the
	// reverse of ONCE_PROVIDER_TIMEOUT's check against ONCE_LEASE).
	for _, tt := range []struct {
		set, partner string
		want         bool
	}{
		{config.EnvProviderTimeout, config.EnvLease, true},
		{config.EnvLease, config.EnvProviderTimeout, true},
		{config.EnvLease, config.EnvRetention, true},
		{config.EnvRetention, config.EnvLease, false},
		{config.EnvProviderSettle, config.EnvRetention, true},
		{config.EnvRetention, config.EnvProviderSettle, false},
		{config.EnvProviderSettle, config.EnvProviderTimeout, true},
		{config.EnvProviderTimeout, config.EnvProviderSettle, false},
		{config.EnvLease, config.EnvProviderKeyRetention, true},
		{config.EnvProviderKeyRetention, config.EnvLease, false},
		{config.EnvProviderSettle, config.EnvProviderKeyRetention, true},
		{config.EnvProviderKeyRetention, config.EnvProviderSettle, false},
		{config.EnvRetention, config.EnvProviderKeyRetention, false},
	} {
		if got := needsPartner(tt.set, tt.partner); got != tt.want {
			t.Errorf("needsPartner(%s, %s) = %v, want %v", tt.set, tt.partner, got, tt.want)
		}
	}
}

// TestCrossChecks checks crossChecks against config.FromEnv: each checked
// value is refused against its partner's default and accepted with the
// partner set.
func TestCrossChecks(t *testing.T) {
	for _, c := range crossChecks {
		bad := maps.Clone(c.also)
		if bad == nil {
			bad = map[string]string{}
		}
		bad[c.checked] = c.bad
		_, err := config.FromEnv(func(k string) string { return bad[k] })
		if err == nil || !strings.Contains(err.Error(), c.checked) {
			t.Errorf("FromEnv(%v) = %v, want an error naming %s", bad, err, c.checked)
		}
		good := maps.Clone(bad)
		good[c.against] = c.good
		if _, err := config.FromEnv(func(k string) string { return good[k] }); err != nil {
			t.Errorf("FromEnv(%v) = %v, want it accepted", good, err)
		}
	}
}

// TestConfigAcceptsTemplate runs config.FromEnv on each function's
// environment as a deployment sets it: with the parameters' defaults, each
// allowed LogLevel, with and without the simulator, and with valid
// parameters other than the defaults (a ProviderTimeout at or above the
// default Lease, with a Lease above it), which only work if every function
// gets every variable FromEnv checks.
func TestConfigAcceptsTemplate(t *testing.T) {
	tm := template(t)
	vars := tm.ParameterDefaults()
	tables, err := tm.Tables("once")
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range tables {
		vars[tbl.LogicalID] = aws.ToString(tbl.Input.TableName)
	}
	for id := range tm.ResourcesOfType("AWS::SQS::Queue") {
		// What !Ref of a queue returns: its URL.
		vars[id] = "https://sqs.us-east-1.amazonaws.com/123456789012/once-" + id + "-1A2B3C4D5E6F"
	}
	levels := list(mapOf(tm.Section("Parameters")["LogLevel"])["AllowedValues"])
	if len(levels) == 0 {
		t.Fatal("LogLevel has no AllowedValues")
	}
	timings := []map[string]string{
		{}, // the defaults
		{"ProviderTimeout": "30s", "Lease": "45s"},
		{"ProviderTimeout": "50s", "Lease": "2m", "ProviderSettle": "1m"},
		{"Retention": config.MinRetention.String()},
		{"Lease": "25h", "Retention": "48h", "ProviderKeyRetention": "48h"},          // a lease over the default retention (and key retention's floor)
		{"ProviderTimeout": "1s", "Lease": "4s"},                                     // a lease under the default provider timeout
		{"ProviderTimeout": "1s", "ProviderSettle": "2s"},                            // a settle under the default provider timeout
		{"ProviderSettle": "25h", "Retention": "48h", "ProviderKeyRetention": "48h"}, // a settle over the default retention (and key retention's floor)
		{"ProviderKeyRetention": "2h1m"},                                             // the least key retention with the defaults
	}
	for _, deploy := range []bool{true, false} {
		for _, level := range levels {
			for _, timing := range timings {
				vars := clone(vars)
				vars["LogLevel"] = fmt.Sprint(level)
				vars["DeployProviderSimulator"] = fmt.Sprint(deploy)
				if !deploy {
					vars["ProviderUrl"] = "https://provider.example.com/"
					vars["MailUrl"] = "https://mail.example.com/"
				}
				for k, v := range timing {
					vars[k] = v
				}
				for id, fn := range tm.Functions() {
					env := map[string]string{}
					for name, v := range fn.Environment() {
						s, err := evalDefault(v, vars, deploy)
						if err != nil {
							t.Fatalf("%s %s: %v", id, name, err)
						}
						env[name] = s
					}
					getenv := func(k string) string { return env[k] }
					_, err := config.FromEnv(getenv)
					if err := errors.Join(err, config.CheckTables(getenv, sortedKeys(tm.ResourcesOfType("AWS::DynamoDB::Table"))...)); err != nil {
						t.Errorf("%s (DeployProviderSimulator=%v, LogLevel=%v, %v): config: %v", id, deploy, level, timing, err)
					}
				}
			}
		}
	}
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// evalDefault evaluates an environment value: !Ref, !Sub, !If
// [DeployProvider, ...] and !GetAtt ProviderFunctionUrl.FunctionUrl.
func evalDefault(v any, vars map[string]string, deployProvider bool) (string, error) {
	if m := mapOf(v); m != nil {
		if args, ok := m["Fn::If"].([]any); ok && len(args) == 3 && args[0] == "DeployProvider" {
			if deployProvider {
				return evalDefault(args[1], vars, deployProvider)
			}
			return evalDefault(args[2], vars, deployProvider)
		}
		if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) == 2 && ga[0] == "ProviderFunctionUrl" {
			// What Lambda returns: note the trailing slash.
			return "https://abcdefghijklmnopqrstuvwxyz012345.lambda-url.us-east-1.on.aws/", nil
		}
	}
	return samtemplate.String(v, vars)
}
