package deploytest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/google/go-cmp/cmp"

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

// designEnv is docs/design.md's "Environment per function", less
// ONCE_FAULT_INJECTION.
var designEnv = map[string][]string{
	"ApiFunction":        {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_IDEMPOTENCY_TABLE", "ONCE_LEASE", "ONCE_ORDERS_TABLE", "ONCE_OUTBOX_TABLE", "ONCE_PAYMENTS_TABLE", "ONCE_PROVIDER_AUTH", "ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL", "ONCE_REFUNDS_TABLE", "ONCE_RETENTION"},
	"AuthorizerFunction": {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_API_KEYS_TABLE"},
	"WorkerFunction":     {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_LEASE", "ONCE_PAYMENTS_TABLE", "ONCE_PROVIDER_AUTH", "ONCE_PROVIDER_SETTLE", "ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL", "ONCE_WORKER_RETRY_QUEUE", "ONCE_WORKER_RETRY_WINDOW", "SQS_ENDPOINT"},
	"RetrierFunction":    {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_LEASE", "ONCE_PAYMENTS_TABLE", "ONCE_PROVIDER_AUTH", "ONCE_PROVIDER_SETTLE", "ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL", "ONCE_WORKER_RETRY_QUEUE", "ONCE_WORKER_RETRY_WINDOW", "SQS_ENDPOINT"},
	"SweeperFunction":    {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_CHECK_QUEUE", "ONCE_IDEMPOTENCY_TABLE", "ONCE_RETENTION", "SQS_ENDPOINT"},
	"CheckerFunction":    {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_CHECK_QUEUE", "ONCE_IDEMPOTENCY_TABLE", "ONCE_RETENTION", "SQS_ENDPOINT"},
	"ReconcilerFunction": {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_IDEMPOTENCY_TABLE", "ONCE_LEASE", "ONCE_ORDERS_TABLE", "ONCE_OUTBOX_TABLE", "ONCE_PAYMENTS_TABLE", "ONCE_PROVIDER_AUTH", "ONCE_PROVIDER_SETTLE", "ONCE_PROVIDER_TIMEOUT", "ONCE_PROVIDER_URL", "ONCE_REFUNDS_TABLE", "ONCE_RETENTION"},
	"ReceiptsFunction":   {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_MAIL_AUTH", "ONCE_MAIL_URL", "ONCE_ORDERS_TABLE", "ONCE_OUTBOX_TABLE"},
	"ProviderFunction":   {"DYNAMODB_ENDPOINT", "LOG_LEVEL", "ONCE_PROVIDER_TABLE"},
}

// envSource is what each variable must be set from.
var envSource = map[string]any{
	"LOG_LEVEL":                map[string]any{"Ref": "LogLevel"},
	"DYNAMODB_ENDPOINT":        map[string]any{"Ref": "DynamoDBEndpoint"},
	"ONCE_IDEMPOTENCY_TABLE":   map[string]any{"Ref": "IdempotencyTable"},
	"ONCE_PAYMENTS_TABLE":      map[string]any{"Ref": "PaymentsTable"},
	"ONCE_REFUNDS_TABLE":       map[string]any{"Ref": "RefundsTable"},
	"ONCE_API_KEYS_TABLE":      map[string]any{"Ref": "ApiKeysTable"},
	"ONCE_PROVIDER_TABLE":      map[string]any{"Ref": "ProviderTable"},
	"ONCE_ORDERS_TABLE":        map[string]any{"Ref": "OrdersTable"},
	"ONCE_OUTBOX_TABLE":        map[string]any{"Ref": "OutboxTable"},
	"ONCE_RETENTION":           map[string]any{"Ref": "Retention"},
	"ONCE_LEASE":               map[string]any{"Ref": "Lease"},
	"ONCE_PROVIDER_TIMEOUT":    map[string]any{"Ref": "ProviderTimeout"},
	"ONCE_PROVIDER_SETTLE":     map[string]any{"Ref": "ProviderSettle"},
	"ONCE_CHECK_QUEUE":         map[string]any{"Ref": "CheckQueue"},
	"ONCE_WORKER_RETRY_QUEUE":  map[string]any{"Ref": "WorkerRetryQueue"},
	"ONCE_WORKER_RETRY_WINDOW": map[string]any{"Ref": "WorkerRetryWindow"},
	"SQS_ENDPOINT":             map[string]any{"Ref": "SQSEndpoint"},
	// The simulator's function URL takes SigV4-signed calls only.
	"ONCE_PROVIDER_AUTH": map[string]any{"Fn::If": []any{"DeployProvider", "aws_iam", "none"}},
	"ONCE_MAIL_AUTH":     map[string]any{"Fn::If": []any{"DeployProvider", "aws_iam", "none"}},
	"ONCE_PROVIDER_URL": map[string]any{"Fn::If": []any{
		"DeployProvider",
		map[string]any{"Fn::GetAtt": []any{"ProviderFunctionUrl", "FunctionUrl"}},
		map[string]any{"Ref": "ProviderUrl"},
	}},
	"ONCE_MAIL_URL": map[string]any{"Fn::If": []any{
		"DeployProvider",
		map[string]any{"Fn::GetAtt": []any{"ProviderFunctionUrl", "FunctionUrl"}},
		map[string]any{"Ref": "MailUrl"},
	}},
}

func TestEnvironmentMatchesDesign(t *testing.T) {
	for id, fn := range template(t).Functions() {
		env := fn.Environment()
		if diff := cmp.Diff(designEnv[id], sortedKeys(env)); diff != "" {
			t.Errorf("%s environment mismatch (-design +template):\n%s", id, diff)
		}
		for name, v := range env {
			if diff := cmp.Diff(envSource[name], v); diff != "" {
				t.Errorf("%s %s value mismatch (-want +got):\n%s", id, name, diff)
			}
		}
	}
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
// from functions/<name> reads is set for its function: the names passed to
// getenv-like calls, and for the fields of config.Config the function uses,
// the config.Env<Field> variable that FromEnv reads into them.
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
		for field, v := range fieldEnv {
			if s.Selected[field] {
				reads[v] = "config." + field
			}
		}
		// config.FromEnv checks some variables against others, whatever
		// the function uses: a function that reads one needs the other
		// too, or a valid deployment fails at init.
		for _, c := range crossChecks {
			if _, ok := reads[c.checked]; ok {
				if _, ok := reads[c.against]; !ok {
					reads[c.against] = "config.FromEnv checks " + c.checked + " against it"
				}
			}
		}
		env := fn.Environment()
		for _, v := range sortedKeys(reads) {
			switch {
			case notFromTemplate(v):
			case v == faultEnv:
				if id != "ApiFunction" {
					t.Errorf("%s reads %s (%s); only the api has crash injection", id, v, reads[v])
				}
			case env[v] == nil:
				t.Errorf("%s reads %s (%s) but template.yaml does not set it", id, v, reads[v])
			}
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
}{
	{checked: config.EnvProviderTimeout, against: config.EnvLease, bad: config.DefaultLease.String(), good: (2 * config.DefaultLease).String()},
}

// TestCrossChecks checks crossChecks against config.FromEnv: each checked
// value is refused against its partner's default and accepted with the
// partner set.
func TestCrossChecks(t *testing.T) {
	for _, c := range crossChecks {
		_, err := config.FromEnv(func(k string) string { return map[string]string{c.checked: c.bad}[k] })
		if err == nil || !strings.Contains(err.Error(), c.checked) {
			t.Errorf("FromEnv(%s=%s) = %v, want an error naming %s", c.checked, c.bad, err, c.checked)
		}
		if _, err := config.FromEnv(func(k string) string { return map[string]string{c.checked: c.bad, c.against: c.good}[k] }); err != nil {
			t.Errorf("FromEnv(%s=%s, %s=%s) = %v, want it accepted", c.checked, c.bad, c.against, c.good, err)
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
					if _, err := config.FromEnv(func(k string) string { return env[k] }); err != nil {
						t.Errorf("%s (DeployProviderSimulator=%v, LogLevel=%v, %v): config.FromEnv: %v", id, deploy, level, timing, err)
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
