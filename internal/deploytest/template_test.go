package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/abandoned"
	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/samtemplate"
	"github.com/oncehq/once/internal/worker"
)

func TestTransform(t *testing.T) {
	if got := template(t).Doc["Transform"]; got != "AWS::Serverless-2016-10-31" {
		t.Errorf("Transform = %v, want AWS::Serverless-2016-10-31", got)
	}
}

func TestParameters(t *testing.T) {
	params := template(t).Section("Parameters")
	want := map[string]string{ // name -> default
		"StageName": "prod", "Architecture": "arm64", "LogLevel": "info", "LogRetentionDays": "30",
		"Retention": "24h", "Lease": "30s", "ProviderTimeout": "5s", "ProviderSettle": "30s", "WorkerRetryWindow": "6h",
		"ProviderKeyRetention":    "24h",
		"WorkerLookUpHorizon":     "24h",
		"ReceiptAttempts":         strconv.Itoa(config.DefaultReceiptAttempts),
		"DeployProviderSimulator": "true", "ProviderUrl": "", "MailUrl": "", "AlarmTopicArn": "", "DynamoDBEndpoint": "", "SQSEndpoint": "",
	}
	if diff := cmp.Diff(sortedKeys(want), sortedKeys(params)); diff != "" {
		t.Errorf("parameters mismatch (-want +got):\n%s", diff)
	}
	defaults := template(t).ParameterDefaults()
	for name, def := range want {
		p := mapOf(params[name])
		typ := "String"
		if name == "LogRetentionDays" { // CloudWatch's RetentionInDays is a number
			typ = "Number"
		}
		if p["Type"] != typ {
			t.Errorf("%s Type = %v, want %s", name, p["Type"], typ)
		}
		if got, ok := defaults[name]; !ok || got != def {
			t.Errorf("%s Default = %q, want %q", name, got, def)
		}
		if pat, ok := p["AllowedPattern"].(string); ok {
			if !regexp.MustCompile(pat).MatchString(def) {
				t.Errorf("%s Default %q does not match its AllowedPattern %q", name, def, pat)
			}
		}
		if allowed := list(p["AllowedValues"]); allowed != nil {
			found := false
			for _, a := range allowed {
				found = found || fmt.Sprint(a) == def
			}
			if !found {
				t.Errorf("%s Default %q is not in AllowedValues %v", name, def, allowed)
			}
		}
	}
	for _, name := range []string{"Retention", "Lease", "ProviderTimeout", "WorkerRetryWindow", "WorkerLookUpHorizon"} {
		d, err := time.ParseDuration(defaults[name])
		if err != nil || d <= 0 {
			t.Errorf("%s Default %q is not a positive Go duration: %v", name, defaults[name], err)
		}
		pat := regexp.MustCompile(mapOf(params[name])["AllowedPattern"].(string))
		for _, bad := range []string{"", "10", "1 h", "-5s", "1d"} {
			if pat.MatchString(bad) {
				t.Errorf("%s AllowedPattern accepts %q", name, bad)
			}
		}
	}
	// The README's deploy section lists every parameter a deployer may set.
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := regexp.MustCompile(`(?s)\nParameters: (.*?)\. The simulator's function URL`).FindSubmatch(readme)
	if listed == nil {
		t.Fatal("README.md has no \"Parameters: ...\" list in its deploy section")
	}
	for _, name := range sortedKeys(want) {
		if !strings.Contains(string(listed[1]), "`"+name+"`") {
			t.Errorf("README.md's deploy section does not list the parameter %s", name)
		}
	}
	if diff := cmp.Diff([]any{"arm64", "x86_64"}, mapOf(params["Architecture"])["AllowedValues"]); diff != "" {
		t.Errorf("Architecture AllowedValues mismatch (-want +got):\n%s", diff)
	}
	// The lease must outlive the api's invocation and API Gateway's 29 s
	// integration timeout, or a request still running loses its key.
	lease, _ := time.ParseDuration(defaults["Lease"])
	apiTimeout := time.Duration(template(t).Functions()["ApiFunction"].Properties["Timeout"].(int)) * time.Second
	if lease <= apiTimeout || lease <= 29*time.Second {
		t.Errorf("Lease default %v must exceed ApiFunction Timeout %v and API Gateway's 29s", lease, apiTimeout)
	}
	// A DynamoDB call that cannot be served fails, its bounded retries spent,
	// before the api's invocation times out: the client gets 503
	// store_unavailable, never the gateway's 5xx of a timed-out function.
	if bound := dynamoclient.CallBound(dynamoclient.Options{}); bound >= apiTimeout {
		t.Errorf("dynamoclient.CallBound(defaults) = %v, want less than ApiFunction Timeout %v", bound, apiTimeout)
	}
	// ApplicationLogLevel follows LogLevel down to DEBUG but never filters
	// above INFO: Lambda files lines without a "level" (the EMF metric lines)
	// as INFO, and dropping them would silence the metrics and the alarms.
	levels := mapOf(template(t).Section("Mappings")["LogLevels"])
	for _, lv := range list(mapOf(params["LogLevel"])["AllowedValues"]) {
		want := "INFO"
		if lv == "debug" {
			want = "DEBUG"
		}
		if got := mapOf(levels[fmt.Sprint(lv)])["Lambda"]; got != want {
			t.Errorf("Mappings.LogLevels.%v.Lambda = %v, want %s", lv, got, want)
		}
	}
	// ProviderUrl and MailUrl are required without the simulator.
	for _, param := range []string{"ProviderUrl", "MailUrl"} {
		rule := mapOf(mapOf(template(t).Section("Rules"))[param+"WithoutSimulator"])
		wantRule := map[string]any{
			"RuleCondition": map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "DeployProviderSimulator"}, "false"}},
			"Assertions": []any{map[string]any{
				"Assert":            map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": param}, ""}}}},
				"AssertDescription": param + " is required when DeployProviderSimulator is false.",
			}},
		}
		if diff := cmp.Diff(wantRule, rule); diff != "" {
			t.Errorf("Rules.%sWithoutSimulator mismatch (-want +got):\n%s", param, diff)
		}
	}
}

func TestProviderSimulator(t *testing.T) {
	wantCond := map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "DeployProviderSimulator"}, "true"}}
	if diff := cmp.Diff(wantCond, template(t).Section("Conditions")["DeployProvider"]); diff != "" {
		t.Errorf("Conditions.DeployProvider mismatch (-want +got):\n%s", diff)
	}
	fn := template(t).Functions()["ProviderFunction"]
	if fn.Condition() != "DeployProvider" {
		t.Errorf("ProviderFunction Condition = %q, want DeployProvider", fn.Condition())
	}
	// Never public: only signed calls of the roles granted
	// lambda:InvokeFunctionUrl (TestLeastPrivilege), no resource policy.
	if diff := cmp.Diff(map[string]any{"AuthType": "AWS_IAM"}, fn.Properties["FunctionUrlConfig"]); diff != "" {
		t.Errorf("ProviderFunction FunctionUrlConfig mismatch (-want +got):\n%s", diff)
	}
	if perms := template(t).ResourcesOfType("AWS::Lambda::Permission"); len(perms) > 0 {
		t.Errorf("the template has AWS::Lambda::Permission resources %v; the simulator is reached through IAM only", sortedKeys(perms))
	}
	for id, f := range template(t).Functions() {
		if id != "ProviderFunction" && f.Condition() != "" {
			t.Errorf("%s has Condition %q; only the simulator is optional", id, f.Condition())
		}
	}
}

// conditional returns the resources created only under DeployProvider,
// SAM's generated function URL included.
func conditional(t *testing.T) map[string]bool {
	out := map[string]bool{"ProviderFunctionUrl": true}
	for id, r := range template(t).Resources() {
		if r.Raw["Condition"] == "DeployProvider" {
			out[id] = true
		}
	}
	return out
}

// TestReferences checks every !Ref and !GetAtt: the target exists (a
// resource, parameter, pseudo parameter or SAM-generated resource), the
// attribute exists for its type, and a resource that only exists under
// DeployProvider is only referenced under that condition.
func TestReferences(t *testing.T) {
	attrs := map[string][]string{
		"AWS::DynamoDB::Table":       {"Arn", "StreamArn"},
		"AWS::SQS::Queue":            {"Arn", "QueueName", "QueueUrl"},
		"AWS::Serverless::Function":  {"Arn"},
		"AWS::IAM::Role":             {"Arn", "RoleId"},
		"AWS::Logs::LogGroup":        {"Arn"},
		"AWS::Lambda::Url":           {"FunctionUrl", "FunctionArn"},
		"AWS::Serverless::Api":       {"RootResourceId"},
		"AWS::CloudWatch::Alarm":     {"Arn"},
		"AWS::ApiGateway::Account":   {},
		"SAM-generated function URL": {"FunctionUrl", "FunctionArn"},
	}
	resources := template(t).Resources()
	typeOf := func(name string) string {
		if name == "ProviderFunctionUrl" {
			return "SAM-generated function URL"
		}
		return resources[name].Type
	}
	params := template(t).Section("Parameters")
	cond := conditional(t)
	var walk func(where string, v any, guarded bool)
	walk = func(where string, v any, guarded bool) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(where, e, guarded)
			}
		case map[string]any:
			if args, ok := x["Fn::If"].([]any); ok && len(args) == 3 {
				walk(where, args[1], guarded || args[0] == "DeployProvider")
				walk(where, args[2], guarded)
				return
			}
			if len(x) == 1 && (x["Ref"] != nil || x["Fn::GetAtt"] != nil || x["Fn::Sub"] != nil) {
				for _, r := range samtemplate.Refs(x) {
					switch {
					case strings.HasPrefix(r.Name, "AWS::"):
					case params[r.Name] != nil && r.Attribute == "":
					case typeOf(r.Name) == "":
						t.Errorf("%s: reference to unknown %s", where, r)
					case r.Attribute != "" && !contains(attrs[typeOf(r.Name)], r.Attribute):
						t.Errorf("%s: %s has no attribute %s (type %s)", where, r.Name, r.Attribute, typeOf(r.Name))
					}
					if cond[r.Name] && !guarded {
						t.Errorf("%s: %s exists only under DeployProvider; reference it under that condition or !If [DeployProvider, ...]", where, r)
					}
				}
				if x["Fn::Sub"] == nil {
					return
				}
			}
			for k, e := range x {
				walk(where, e, guarded)
				_ = k
			}
		}
	}
	for id, r := range resources {
		walk(id, r.Properties, r.Raw["Condition"] == "DeployProvider")
	}
	for id, o := range template(t).Section("Outputs") {
		walk("Outputs."+id, o, mapOf(o)["Condition"] == "DeployProvider")
	}
	for k, v := range template(t).Section("Globals") {
		walk("Globals."+k, v, false)
	}
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

func TestApi(t *testing.T) {
	apis := template(t).ResourcesOfType("AWS::Serverless::Api")
	if len(apis) != 1 || apis["Api"].Type == "" {
		t.Fatalf("AWS::Serverless::Api resources = %v, want one, Api", sortedKeys(apis))
	}
	p := apis["Api"].Properties
	if diff := cmp.Diff(map[string]any{"Ref": "StageName"}, p["StageName"]); diff != "" {
		t.Errorf("Api StageName mismatch (-want +got):\n%s", diff)
	}
	wantAuth := map[string]any{
		"DefaultAuthorizer": "ApiKeyAuthorizer",
		"Authorizers": map[string]any{"ApiKeyAuthorizer": map[string]any{
			"FunctionPayloadType": "REQUEST",
			"FunctionArn":         map[string]any{"Fn::GetAtt": []any{"AuthorizerFunction", "Arn"}},
			"Identity":            map[string]any{"Headers": []any{"Authorization"}, "ReauthorizeEvery": 300},
		}},
	}
	if diff := cmp.Diff(wantAuth, p["Auth"]); diff != "" {
		t.Errorf("Api Auth mismatch (-want +got):\n%s", diff)
	}
	ms := list(p["MethodSettings"])
	if len(ms) != 1 {
		t.Fatalf("Api MethodSettings = %v, want one for /* *", ms)
	}
	m := mapOf(ms[0])
	if m["ResourcePath"] != "/*" || m["HttpMethod"] != "*" {
		t.Errorf("MethodSettings ResourcePath/HttpMethod = %v %v, want /* *", m["ResourcePath"], m["HttpMethod"])
	}
	burst, _ := m["ThrottlingBurstLimit"].(int)
	rate, _ := m["ThrottlingRateLimit"].(int)
	if burst <= 0 || rate <= 0 || burst < rate {
		t.Errorf("MethodSettings throttling burst %v, rate %v: want both positive, burst >= rate", m["ThrottlingBurstLimit"], m["ThrottlingRateLimit"])
	}
	// The README's rate_limited row quotes the stage's throttling.
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("throttling (%d requests a second, bursts of %d)", rate, burst); !strings.Contains(string(readme), want) {
		t.Errorf("the README's rate_limited row does not say %q, as MethodSettings has it", want)
	}
	if m["DataTraceEnabled"] != false {
		t.Errorf("MethodSettings DataTraceEnabled = %v, want false (it would log request bodies and keys)", m["DataTraceEnabled"])
	}
	als := mapOf(p["AccessLogSetting"])
	refs := samtemplate.Refs(als["DestinationArn"])
	if len(refs) != 1 || template(t).Resources()[refs[0].Name].Type != "AWS::Logs::LogGroup" {
		t.Errorf("AccessLogSetting.DestinationArn = %v, want !GetAtt <log group>.Arn", als["DestinationArn"])
	} else if lg := template(t).Resources()[refs[0].Name]; lg.Properties["RetentionInDays"] == nil {
		t.Errorf("%s has no RetentionInDays", refs[0].Name)
	}
	format, _ := als["Format"].(string)
	var fields map[string]string
	if err := json.Unmarshal([]byte(format), &fields); err != nil {
		t.Errorf("AccessLogSetting.Format is not a JSON object of strings: %v\n%s", err, format)
	}
	for _, k := range []string{"requestId", "status", "httpMethod", "resourcePath", "integrationLatency"} {
		if fields[k] == "" {
			t.Errorf("AccessLogSetting.Format lacks %q", k)
		}
	}
	for k, v := range fields {
		if !regexp.MustCompile(`^\$context\.[A-Za-z.]+$`).MatchString(v) {
			t.Errorf("AccessLogSetting.Format %q = %q, want one $context variable", k, v)
		}
	}
}

// maxQueueAge is the threshold of the alarms on the age of a work queue's
// oldest message, in seconds.
const maxQueueAge = 3600

// maxIteratorAgeMS is the threshold of every stream-triggered function's
// IteratorAge alarm: 10 minutes behind, under every mapping's
// MaximumRecordAgeInSeconds, so that a record its function keeps failing is
// alarmed before the mapping gives it up to its on-failure queue.
const maxIteratorAgeMS = 600000

// persistentAlarms are the alarms that fire on their metric persisting,
// not on its first occurrence: the retrier's failed reads of payments,
// failed look-ups of charges at the provider and failed settles (after a
// charge within the retry window, or on a look-up's answer), each of which
// it sends back with backoff (each its own new message, so no queue age
// grows and nothing is dead-lettered before the look-up horizon); and the
// stream worker's failed settles, each of which sends its payment to the
// retry queue the same way (Service=worker: the retrier's alarm does not
// see them).
var persistentAlarms = map[string]bool{
	"WorkerRetryReadFailedAlarm":   true,
	"WorkerRetryLookUpFailedAlarm": true,
	"WorkerRetrySettleFailedAlarm": true,
	"WorkerSettleFailedAlarm":      true,
}

// dailyAlarms are the alarms on a figure each record of the idempotency
// table contributes to every audit.Segments hours (the auditor's
// abandoned_records, one segment of the table an hour): they look at more
// than twice that many hourly maxima, so that they stay up for as long as
// such a record exists, a missed run included (see TestDailyAlarms).
var dailyAlarms = map[string]bool{
	"AbandonedRecordsAlarm": true,
}

// heartbeatAlarms fire when a figure a scheduled function emits every run
// stops coming: on metric math, FILL(m1, 0) of its hourly SampleCount
// below 1, missing data breaching (see TestHeartbeatAlarms). They are the
// exception to every other alarm's GreaterThanThreshold, notBreaching and
// single period.
var heartbeatAlarms = map[string]bool{
	"AuditorSilentAlarm": true,
}

// alarmMetric returns an alarm's properties with, for an alarm on metric
// math (Metrics), the Namespace, MetricName and Dimensions of the one
// metric its expression reads (its MetricDataQuery with a MetricStat).
func alarmMetric(p map[string]any) map[string]any {
	queries := list(p["Metrics"])
	if len(queries) == 0 {
		return p
	}
	out := map[string]any{}
	for k, v := range p {
		out[k] = v
	}
	for _, q := range queries {
		if stat := mapOf(mapOf(q)["MetricStat"]); stat != nil {
			for k, v := range mapOf(stat["Metric"]) {
				out[k] = v
			}
		}
	}
	return out
}

// TestAlarms: an alarm on every dead-letter queue's messages, on every
// function's errors and throttles, on every stream-triggered function's
// IteratorAge (maxIteratorAgeMS), on reconcile_failed,
// reconcile_unroutable, reconcile_effects_dropped, zombie_unrestored,
// reserve_effects_dropped, the api's tenant_invalid, the auditor's abandoned_records and
// audit_incomplete, the retrier's worker_read_failed,
// worker_lookup_failed and worker_settle_failed, and the stream worker's
// worker_settle_failed (each a metric its function's code emits), and on the age of every work queue's oldest
// message (a consumer that does not consume sends nothing to its
// dead-letter queue). Every alarm notifies AlarmTopicArn when it is set.
// Every alarm fires on any occurrence in one period but the age alarms,
// which fire above what a healthy message can wait: SQS's longest delay,
// then the receives that fail before its redrive policy moves it; and the
// persistent alarms (see TestPersistentAlarms) and the daily ones (see
// TestDailyAlarms).
func TestAlarms(t *testing.T) {
	queues, err := template(t).Queues()
	if err != nil {
		t.Fatal(err)
	}
	var work []samtemplate.Queue
	for _, q := range queues {
		if q.DeadLetter != "" {
			work = append(work, q)
		}
	}
	if len(work) == 0 {
		t.Fatal("no work queues (queues with a redrive policy)")
	}
	var got []string
	emf := map[string][]string{} // the once namespace's alarmed metrics, by Service
	for id, r := range template(t).ResourcesOfType("AWS::CloudWatch::Alarm") {
		p := alarmMetric(r.Properties)
		threshold := 0
		switch p["MetricName"] {
		case "ApproximateAgeOfOldestMessage":
			threshold = maxQueueAge
		case "IteratorAge":
			threshold = maxIteratorAgeMS
		}
		if heartbeatAlarms[id] {
			// Checked by TestHeartbeatAlarms.
		} else if p["ComparisonOperator"] != "GreaterThanThreshold" || p["Threshold"] != threshold {
			t.Errorf("%s: %v %v, want GreaterThanThreshold %d", id, p["ComparisonOperator"], p["Threshold"], threshold)
		}
		if p["TreatMissingData"] != "notBreaching" && !heartbeatAlarms[id] {
			t.Errorf("%s TreatMissingData = %v, want notBreaching", id, p["TreatMissingData"])
		}
		wantActions := map[string]any{"Fn::If": []any{"HasAlarmTopic", []any{map[string]any{"Ref": "AlarmTopicArn"}}, map[string]any{"Ref": "AWS::NoValue"}}}
		if diff := cmp.Diff(wantActions, p["AlarmActions"]); diff != "" {
			t.Errorf("%s AlarmActions mismatch (-want +got):\n%s", id, diff)
		}
		if !persistentAlarms[id] && !dailyAlarms[id] && !heartbeatAlarms[id] && (p["EvaluationPeriods"] != 1 || p["DatapointsToAlarm"] != nil) {
			t.Errorf("%s: EvaluationPeriods %v, DatapointsToAlarm %v; want 1 and none (it fires on one period)", id, p["EvaluationPeriods"], p["DatapointsToAlarm"])
		}
		dims := list(p["Dimensions"])
		if len(dims) != 1 {
			t.Errorf("%s Dimensions = %v, want one", id, dims)
			continue
		}
		d := mapOf(dims[0])
		target := fmt.Sprint(d["Value"])
		if refs := samtemplate.Refs(d["Value"]); len(refs) == 1 {
			target = refs[0].String()
			if cond := template(t).Resources()[refs[0].Name].Raw["Condition"]; r.Raw["Condition"] != cond {
				t.Errorf("%s Condition = %v, want its target's, %v", id, r.Raw["Condition"], cond)
			}
		}
		got = append(got, fmt.Sprintf("%v %v %v=%s", p["Namespace"], p["MetricName"], d["Name"], target))
		if p["Namespace"] == "once" && d["Name"] == "Service" {
			emf[target] = append(emf[target], fmt.Sprint(p["MetricName"]))
		}
	}
	var want []string
	for _, id := range deadLetterQueues(t) {
		want = append(want, "AWS/SQS ApproximateNumberOfMessagesVisible QueueName="+id+".QueueName")
	}
	for id, fn := range template(t).Functions() {
		want = append(want, "AWS/Lambda Errors FunctionName="+id, "AWS/Lambda Throttles FunctionName="+id)
		for _, ev := range fn.Events() {
			if ev.Type != "DynamoDB" {
				continue
			}
			want = append(want, "AWS/Lambda IteratorAge FunctionName="+id)
			age, ok := ev.Properties["MaximumRecordAgeInSeconds"].(int)
			if !ok || age*1000 <= maxIteratorAgeMS {
				t.Errorf("%s %s MaximumRecordAgeInSeconds = %v: want a number of seconds above the IteratorAge alarm's %d ms, "+
					"so that the alarm fires before a failing record is given up", id, ev.Name, ev.Properties["MaximumRecordAgeInSeconds"], maxIteratorAgeMS)
			}
		}
	}
	want = append(want, "once reconcile_failed Service=reconciler", "once reconcile_unroutable Service=reconciler",
		"once reconcile_effects_dropped Service=reconciler", "once zombie_unrestored Service=sweeper",
		"once reserve_effects_dropped Service=api", "once tenant_invalid Service=api", "once worker_read_failed Service=retrier",
		"once worker_lookup_failed Service=retrier", "once worker_settle_failed Service=retrier",
		"once worker_settle_failed Service=worker",
		"once abandoned_records Service=auditor", "once audit_incomplete Service=auditor",
		"once audit_incomplete Service=auditor") // AuditorSilentAlarm

	for _, q := range work {
		want = append(want, "AWS/SQS ApproximateAgeOfOldestMessage QueueName="+q.LogicalID+".QueueName")
		visibility, err := strconv.Atoi(q.Attributes["VisibilityTimeout"])
		if err != nil {
			t.Fatalf("%s VisibilityTimeout: %v", q.LogicalID, err)
		}
		if healthy := 900 + q.MaxReceiveCount*visibility; healthy >= maxQueueAge {
			t.Errorf("%s: a healthy message may wait %ds (15 min of delay, %d receives of %ds), not under the age alarm's %ds",
				q.LogicalID, healthy, q.MaxReceiveCount, visibility, maxQueueAge)
		}
	}
	if diff := cmp.Diff(sortedSlice(want), sortedSlice(got)); diff != "" {
		t.Errorf("alarms mismatch (-want +got):\n%s", diff)
	}

	// Each EMF metric comes from the code of the function its Service
	// names, with that namespace and dimension.
	if ns := stringConsts(t, filepath.Join(root(t), "internal", "app"), regexp.MustCompile(`^MetricsNamespace$`)); ns["MetricsNamespace"] != "once" {
		t.Errorf("app.MetricsNamespace = %q, want once (the alarms' namespace)", ns["MetricsNamespace"])
	}
	for _, service := range sortedKeys(emf) {
		if !hasFolder(t, service) {
			t.Errorf("functions/%s does not exist: the alarms on %v {Service: %s} have no metric", service, emf[service], service)
			continue
		}
		metrics := sortedSlice(emf[service])
		s := scanFunction(t, service)
		for _, lit := range append([]string{"Service", service}, metrics...) {
			if !s.Strings[lit] {
				t.Errorf("the %s function's code has no %q literal: the alarms on once %v {Service: %s} would never fire", service, lit, metrics, service)
			}
		}
	}
}

// TestPersistentAlarms: an alarm on a metric persisting (the retrier's
// worker_read_failed, a run of failed reads of payments;
// worker_lookup_failed and worker_settle_failed, a run of failed look-ups
// of charges or of settles) fires on DatapointsToAlarm periods with a
// count out of EvaluationPeriods, and does so for an outage however few
// messages it holds back, not for a fault that passes within one period.
// One message alone is read, charged and settled, or looked up, again
// every MaxRetryDelay/2 to MaxRetryDelay once its backoff is capped (the
// attempts', the reads' and the look-ups' backoffs alike, equal jitter),
// give or take a minute
// of polling, the SDK's own retries and one provider call (ProviderTimeout,
// well under the minute): so each of its failures falls in a period of its
// own when a Period is at most MaxRetryDelay/2, and the evaluation range
// holds DatapointsToAlarm of them when it is at least DatapointsToAlarm
// intervals long. A fault shorter than a Period touches at most 2 periods:
// DatapointsToAlarm must be more. The stream worker's worker_settle_failed
// (one per payment met on the stream whose settle failed, each then
// retried by the retrier) is held to the same numbers: it fires while new
// payments meet the outage, and a fault within a period does not.
func TestPersistentAlarms(t *testing.T) {
	alarms := template(t).ResourcesOfType("AWS::CloudWatch::Alarm")
	maxDelay := int(worker.MaxRetryDelay / time.Second)
	if call, err := time.ParseDuration(template(t).ParameterDefaults()["ProviderTimeout"]); err != nil || call > 30*time.Second {
		t.Errorf("ProviderTimeout default = %v (%v), want at most 30s: a failed look-up must hold its message well under the minute of slack", call, err)
	}
	for _, id := range sortedKeys(persistentAlarms) {
		r, ok := alarms[id]
		if !ok {
			t.Errorf("%s: no such alarm", id)
			continue
		}
		p := r.Properties
		period, _ := p["Period"].(int)
		evaluations, _ := p["EvaluationPeriods"].(int)
		datapoints, _ := p["DatapointsToAlarm"].(int)
		if p["Statistic"] != "Sum" || period <= 0 || evaluations <= 0 || datapoints <= 0 || datapoints > evaluations {
			t.Errorf("%s: Statistic %v, Period %v, EvaluationPeriods %v, DatapointsToAlarm %v; want Sum, positive numbers, DatapointsToAlarm at most EvaluationPeriods",
				id, p["Statistic"], p["Period"], p["EvaluationPeriods"], p["DatapointsToAlarm"])
			continue
		}
		if datapoints < 3 {
			t.Errorf("%s DatapointsToAlarm = %d, want 3 or more: a fault shorter than a period touches 2", id, datapoints)
		}
		if period > maxDelay/2 {
			t.Errorf("%s Period = %ds, want at most %ds (half the retries' longest delay): one message's failures would share periods", id, period, maxDelay/2)
		}
		if window, need := period*evaluations, datapoints*(maxDelay+60); window < need {
			t.Errorf("%s: %d periods of %ds = %ds, want at least %ds: one message's %d failures, %ds apart at most, would not fit",
				id, evaluations, period, window, need, datapoints, maxDelay+60)
		}
		if period*evaluations > 86400 {
			t.Errorf("%s: %d periods of %ds, over CloudWatch's one day of evaluation", id, evaluations, period)
		}
	}
}

// TestDailyAlarms: an alarm on the auditor's abandoned_records fires on
// one hourly maximum above 0 in its window (EvaluationPeriods periods of an
// hour), so it stays up for that window after each sighting; the auditor
// runs every hour and scans one of audit.Segments segments a run, so a
// stuck record is seen every audit.Segments hours. A window of more than
// Segments periods always holds a sighting (one in period p, the next in
// p+Segments), so the alarm never drops to OK while the record is stuck;
// one of more than 2 x Segments periods still does when one run is missed
// (its three asynchronous attempts failed), the sighting before it and the
// one after being 2 x Segments periods apart. CloudWatch allows Period x
// EvaluationPeriods up to 7 days (604,800 s) for periods of an hour or
// more (a day for shorter ones).
func TestDailyAlarms(t *testing.T) {
	alarms := template(t).ResourcesOfType("AWS::CloudWatch::Alarm")
	fn := template(t).Functions()["AuditorFunction"]
	var schedule string
	for _, ev := range fn.Events() {
		if ev.Type == "Schedule" {
			schedule = fmt.Sprint(ev.Properties["Schedule"])
		}
	}
	// Every hour at minute 5: the event's time, which a run's segment and
	// its figures' timestamps come from, is the time the rule was
	// scheduled to trigger, early in its hour whenever the stack was
	// deployed (rate(1 hour) would run at the deploy time's minute, xx:58
	// say, and a run's figures, late or retried, would land after their
	// hour).
	if schedule != audit.Schedule {
		t.Errorf("AuditorFunction Schedule = %q, want %s: one segment an hour, early in the hour", schedule, audit.Schedule)
	}
	// A run stops starting pages audit.Margin before its deadline: its
	// timeout must leave it, before the margin, time for at least
	// minPages pages each as slow as its client lets one be
	// (dynamoclient.CallBound of audit.ClientOptions: every attempt
	// running out its timeout), or a slow table stops every run after a
	// page.
	const minPages = 2
	page := dynamoclient.CallBound(audit.ClientOptions())
	if timeout, _ := fn.Properties["Timeout"].(int); time.Duration(timeout)*time.Second-audit.Margin < minPages*page {
		t.Errorf("AuditorFunction Timeout = %v s, want at least audit.Margin (%v) + %d worst-case pages of %v (dynamoclient.CallBound(audit.ClientOptions())) = %v",
			fn.Properties["Timeout"], audit.Margin, minPages, page, audit.Margin+minPages*page)
	}
	for _, id := range sortedKeys(dailyAlarms) {
		r, ok := alarms[id]
		if !ok {
			t.Errorf("%s: no such alarm", id)
			continue
		}
		p := r.Properties
		period, _ := p["Period"].(int)
		evaluations, _ := p["EvaluationPeriods"].(int)
		if p["Statistic"] != "Maximum" || period != 3600 || p["DatapointsToAlarm"] != 1 {
			t.Errorf("%s: Statistic %v, Period %v, DatapointsToAlarm %v; want Maximum, 3600 (one run), 1", id, p["Statistic"], p["Period"], p["DatapointsToAlarm"])
		}
		if window := period * evaluations; window > 604800 || window <= 2*audit.Segments*3600 {
			t.Errorf("%s: %d periods of %ds = %ds, want more than the %d hours between a sighting of a record and the next but one (2 x audit.Segments: one missed run tolerated) and at most CloudWatch's 7 days (604800s)",
				id, evaluations, period, window, 2*audit.Segments)
		}
		desc, _ := p["AlarmDescription"].(string)
		for _, want := range []string{"oncectl unknown", "oncectl reannounce -lost", "oncectl dlq redrive check"} {
			if !strings.Contains(desc, want) {
				t.Errorf("%s AlarmDescription = %q, want it to say %q", id, desc, want)
			}
		}
	}
}

// TestHeartbeatAlarms: an alarm fires when the auditor stops running (its
// schedule disabled, its invocations failing or throttled): no
// audit_incomplete, which every run that reads a page or stops at its
// bound emits, 0 included, in 3 or 4 scheduled runs. CloudWatch fills a
// shortfall of datapoints with TreatMissingData only when the evaluation
// range holds fewer than it evaluates, real datapoints first ("1 - - -",
// one hour with a run then three without a datapoint, evaluates OK): the
// alarm is exact only on metric math that fills every hour without a
// sample with 0, FILL(m1, 0), so that each of its EvaluationPeriods holds
// a datapoint, 1 for an hour with a run and 0 for one without. 4 of 4
// hourly periods: after the third missed run if the current hour counts
// (0 until its run publishes) and FILL fills the range's ends, else after
// the fourth; neither is checked on AWS, and the description says so.
// Missing data (a new stack before its first run, if FILL returns no
// datapoint at all) breaches.
func TestHeartbeatAlarms(t *testing.T) {
	alarms := template(t).ResourcesOfType("AWS::CloudWatch::Alarm")
	for _, id := range sortedKeys(heartbeatAlarms) {
		r, ok := alarms[id]
		if !ok {
			t.Errorf("%s: no such alarm", id)
			continue
		}
		p := r.Properties
		for _, top := range []string{"MetricName", "Namespace", "Dimensions", "Statistic", "Period", "ExtendedStatistic", "Unit"} {
			if _, ok := p[top]; ok {
				t.Errorf("%s has %s beside Metrics: AWS::CloudWatch::Alarm takes one or the other", id, top)
			}
		}
		got := fmt.Sprintf("%v %v, %v of %v, missing %v", p["ComparisonOperator"], p["Threshold"], p["DatapointsToAlarm"], p["EvaluationPeriods"], p["TreatMissingData"])
		if want := "LessThanThreshold 1, 4 of 4, missing breaching"; got != want {
			t.Errorf("%s = %s, want %s", id, got, want)
		}
		want := []any{
			map[string]any{"Id": "m1", "ReturnData": false, "MetricStat": map[string]any{
				"Metric": map[string]any{"Namespace": "once", "MetricName": audit.MetricIncomplete,
					"Dimensions": []any{map[string]any{"Name": "Service", "Value": "auditor"}}},
				"Period": 3600, "Stat": "SampleCount"}},
			map[string]any{"Id": "e1", "Expression": "FILL(m1, 0)", "ReturnData": true},
		}
		if diff := cmp.Diff(want, p["Metrics"]); diff != "" {
			t.Errorf("%s Metrics mismatch (-want +got):\n%s", id, diff)
		}
		desc, _ := p["AlarmDescription"].(string)
		for _, want := range []string{"AuditorFunction", "AbandonedRecordsAlarm", "oncectl unknown", "3 or 4 scheduled runs", "not checked on AWS", "first run"} {
			if !strings.Contains(desc, want) {
				t.Errorf("%s AlarmDescription = %q, want it to say %q", id, desc, want)
			}
		}
	}
}

// TestAuditIncompleteAlarm: AuditIncompleteAlarm's advice follows what
// stopped the run, as its log line's stopped_by says (audit.Audit's
// page bound, deadline or scan error), and says that oncectl unknown stops
// at 10,000 pages too.
func TestAuditIncompleteAlarm(t *testing.T) {
	p := template(t).ResourcesOfType("AWS::CloudWatch::Alarm")["AuditIncompleteAlarm"].Properties
	desc, _ := p["AlarmDescription"].(string)
	for _, want := range []string{"stopped_by", "page bound", "deadline", "scan error", "Timeout", "audit.Segments", "10,000 pages"} {
		if !strings.Contains(desc, want) {
			t.Errorf("AuditIncompleteAlarm AlarmDescription = %q, want it to say %q", desc, want)
		}
	}
	if strings.Contains(desc, "whole table") {
		t.Errorf("AuditIncompleteAlarm AlarmDescription = %q: oncectl unknown does not read the whole table past 10,000 pages", desc)
	}
}

// TestStreamMaxRecordAge: the auditor waits, before it counts an External
// reservation stuck, for the sweeper's stream retries of its last write
// (abandoned.StreamMaxRecordAge): they must be the sweeper mapping's
// MaximumRecordAgeInSeconds.
func TestStreamMaxRecordAge(t *testing.T) {
	p := streamEvent(t, "SweeperFunction").Properties
	if n, _ := p["MaximumRecordAgeInSeconds"].(int); time.Duration(n)*time.Second != abandoned.StreamMaxRecordAge {
		t.Errorf("SweeperFunction MaximumRecordAgeInSeconds = %v, want abandoned.StreamMaxRecordAge (%v)", p["MaximumRecordAgeInSeconds"], abandoned.StreamMaxRecordAge)
	}
}

// TestOutputs derives the outputs an operator needs: the API's URL and ID,
// each table's name (<Table>Name) and each queue's URL (<Queue>Url), and the
// provider's and the mail API's URLs as the functions get them.
func TestOutputs(t *testing.T) {
	want := map[string]any{
		"ApiUrl":      map[string]any{"Fn::Sub": "https://${Api}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}"},
		"ApiId":       map[string]any{"Ref": "Api"},
		"ProviderUrl": envURL("ProviderUrl"),
		"MailUrl":     envURL("MailUrl"),
	}
	for id := range template(t).ResourcesOfType("AWS::DynamoDB::Table") {
		want[id+"Name"] = map[string]any{"Ref": id}
	}
	for id := range template(t).ResourcesOfType("AWS::SQS::Queue") {
		want[id+"Url"] = map[string]any{"Ref": id}
	}
	got := map[string]any{}
	for k, v := range template(t).Section("Outputs") {
		got[k] = mapOf(v)["Value"]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Outputs mismatch (-want +got):\n%s", diff)
	}
}

// TestCfnLintConfig checks the template's cfn-lint configuration, which
// `sam validate` applies (samconfig.toml: lint = true): only E3724 is
// ignored, the false positive of cfn-lint 1.54.0 to 1.56.0 on
// Globals.Function.Architectures: [!Ref Architecture], whose parameter
// allows exactly the two architectures. Anything more would hide real
// findings.
func TestCfnLintConfig(t *testing.T) {
	want := map[string]any{"cfn-lint": map[string]any{"config": map[string]any{"ignore_checks": []any{"E3724"}}}}
	if diff := cmp.Diff(want, template(t).Doc["Metadata"]); diff != "" {
		t.Errorf("template Metadata mismatch (-want +got):\n%s", diff)
	}
	arch := mapOf(template(t).Section("Parameters")["Architecture"])
	if diff := cmp.Diff([]any{"arm64", "x86_64"}, arch["AllowedValues"]); diff != "" {
		t.Errorf("Architecture AllowedValues (-want +got), which make E3724 a false positive:\n%s", diff)
	}
	// The lint that needs it runs with sam validate.
	sc, err := samtemplate.LoadSAMConfig(filepath.Join(root(t), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Parameters("default", "validate")["lint"]; got != true {
		t.Errorf("samconfig.toml [default.validate.parameters] lint = %v, want true", got)
	}
}

// TestRecoveryDLQAlarms: the alarms on the recovery chain's dead-letter
// queues (a check the Checker gave up on, the Scheduler's stream record the
// sweeper gave up on) tell the operator what ends the records left behind,
// as nothing timed does (no TTL on an External reservation or an UNKNOWN
// record): oncectl reannounce -lost; that the message is gone after the
// queue's retention, in days, and the alarm clears; and that
// AbandonedRecordsAlarm fires for the record after that, while it is stuck. Every
// alarm's description fits CloudFormation's 1024 characters.
func TestRecoveryDLQAlarms(t *testing.T) {
	res := template(t).Resources()
	for id, r := range template(t).ResourcesOfType("AWS::CloudWatch::Alarm") {
		if d, _ := r.Properties["AlarmDescription"].(string); len(d) > 1024 {
			t.Errorf("%s AlarmDescription is %d characters, want at most 1024", id, len(d))
		}
	}
	for alarm, queue := range map[string]string{"CheckDLQAlarm": "CheckDLQ", "SweeperDLQAlarm": "SweeperDLQ"} {
		a, ok := res[alarm]
		if !ok {
			t.Errorf("no %s", alarm)
			continue
		}
		q, ok := res[queue]
		if !ok {
			t.Errorf("no %s", queue)
			continue
		}
		secs, ok := q.Properties["MessageRetentionPeriod"].(int)
		if !ok || secs%86400 != 0 {
			t.Errorf("%s MessageRetentionPeriod = %v, want whole days", queue, q.Properties["MessageRetentionPeriod"])
			continue
		}
		desc, _ := a.Properties["AlarmDescription"].(string)
		for _, want := range []string{"oncectl reannounce -lost", fmt.Sprintf("%d days", secs/86400), "alarm clears", "AbandonedRecordsAlarm fires"} {
			if !strings.Contains(desc, want) {
				t.Errorf("%s AlarmDescription = %q, want it to say %q", alarm, desc, want)
			}
		}
	}
}

// TestApiGatewayAccountNoted checks that the README's deploy section warns
// about AWS::ApiGateway::Account, one setting per account and region that
// every stack deploying one overwrites.
func TestApiGatewayAccountNoted(t *testing.T) {
	if len(template(t).ResourcesOfType("AWS::ApiGateway::Account")) == 0 {
		t.Skip("the template sets no AWS::ApiGateway::Account")
	}
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)\n### AWS, with the SAM CLI\n(.*?)\n### `).FindSubmatch(readme)
	if section == nil {
		t.Fatal(`README.md has no "### AWS, with the SAM CLI" section`)
	}
	text := strings.Join(strings.Fields(string(section[1])), " ")
	for _, want := range []string{"`AWS::ApiGateway::Account`", "one setting per account and region", "overwrites"} {
		if !strings.Contains(text, want) {
			t.Errorf("README.md's deploy section does not say %q", want)
		}
	}
}
