package deploytest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// logRetentionDays are the values CloudWatch Logs takes for a log group's
// RetentionInDays (CloudFormation, AWS::Logs::LogGroup).
var logRetentionDays = []any{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// TestFunctionLogGroups checks that every function logs to a log group of
// the stack's (LoggingConfig.LogGroup, merged with the globals' format and
// levels), created under the function's condition, deleted with the stack,
// and kept LogRetentionDays; and that every log group of the template is
// kept so long.
func TestFunctionLogGroups(t *testing.T) {
	p := mapOf(template(t).Section("Parameters")["LogRetentionDays"])
	if p == nil {
		t.Fatal("no LogRetentionDays parameter")
	}
	if p["Type"] != "Number" || fmt.Sprint(p["Default"]) != "30" {
		t.Errorf("LogRetentionDays Type = %v, Default = %v, want Number, 30", p["Type"], p["Default"])
	}
	if diff := cmp.Diff(logRetentionDays, p["AllowedValues"]); diff != "" {
		t.Errorf("LogRetentionDays AllowedValues mismatch (-CloudWatch's +got):\n%s", diff)
	}
	resources := template(t).Resources()
	used := map[string]bool{}
	for _, id := range sortedKeys(template(t).Functions()) {
		fn := template(t).Functions()[id]
		cfg := mapOf(fn.Properties["LoggingConfig"])
		if cfg["LogFormat"] != "JSON" || cfg["SystemLogLevel"] != "WARN" || cfg["ApplicationLogLevel"] == nil {
			t.Errorf("%s LoggingConfig = %v: want the globals' LogFormat and levels", id, cfg)
		}
		group := id + "LogGroup"
		if diff := cmp.Diff(map[string]any{"Ref": group}, cfg["LogGroup"]); diff != "" {
			t.Errorf("%s LoggingConfig.LogGroup mismatch (-want +got):\n%s", id, diff)
		}
		r, ok := resources[group]
		if !ok || r.Type != "AWS::Logs::LogGroup" {
			t.Errorf("%s: no AWS::Logs::LogGroup %s", id, group)
			continue
		}
		used[group] = true
		if got, want := r.Raw["Condition"], fn.Raw["Condition"]; got != want {
			t.Errorf("%s Condition = %v, want the function's, %v", group, got, want)
		}
		if diff := cmp.Diff(map[string]any{"Fn::Sub": "/aws/lambda/${AWS::StackName}/" + id}, r.Properties["LogGroupName"]); diff != "" {
			t.Errorf("%s LogGroupName mismatch (-want +got):\n%s", group, diff)
		}
	}
	for _, id := range sortedKeys(template(t).ResourcesOfType("AWS::Logs::LogGroup")) {
		r := resources[id]
		if diff := cmp.Diff(map[string]any{"Ref": "LogRetentionDays"}, r.Properties["RetentionInDays"]); diff != "" {
			t.Errorf("%s RetentionInDays mismatch (-want +got):\n%s", id, diff)
		}
		if r.Raw["DeletionPolicy"] != "Delete" || r.Raw["UpdateReplacePolicy"] != "Delete" {
			t.Errorf("%s DeletionPolicy = %v, UpdateReplacePolicy = %v: want Delete, with the stack", id, r.Raw["DeletionPolicy"], r.Raw["UpdateReplacePolicy"])
		}
		if !used[id] && id != "ApiAccessLogGroup" {
			t.Errorf("%s is no function's log group", id)
		}
	}
}
