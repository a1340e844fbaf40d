package deploytest

import (
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/samtemplate"
)

// tableSpec is what docs/design.md says of a table.
type tableSpec struct {
	suffix string // TableName is ${AWS::StackName}-<suffix>
	ttl    string // TTL attribute, "" for none
	stream string // StreamViewType, "" for none
	retain bool   // DeletionPolicy and UpdateReplacePolicy Retain (money state)
}

var designTables = map[string]tableSpec{
	"IdempotencyTable": {suffix: "idempotency", ttl: "expires_at", stream: "NEW_AND_OLD_IMAGES", retain: true},
	"PaymentsTable":    {suffix: "payments", stream: "NEW_AND_OLD_IMAGES", retain: true},
	"RefundsTable":     {suffix: "refunds", retain: true},
	"ApiKeysTable":     {suffix: "api-keys", retain: true},
	"ProviderTable":    {suffix: "provider"},
	"OrdersTable":      {suffix: "orders", retain: true},
	"OutboxTable":      {suffix: "outbox", ttl: "expires_at", stream: "NEW_AND_OLD_IMAGES"},
}

// partitionKey is the design's key of every table: a single string pk.
const partitionKey = "pk"

func TestTablesMatchDesign(t *testing.T) {
	tables := template(t).ResourcesOfType("AWS::DynamoDB::Table")
	if diff := cmp.Diff(sortedKeys(designTables), sortedKeys(tables)); diff != "" {
		t.Fatalf("table logical IDs mismatch (-design +template):\n%s", diff)
	}
	for id, spec := range designTables {
		r := tables[id]
		p := r.Properties
		name, err := samtemplate.String(p["TableName"], map[string]string{"AWS::StackName": "st"})
		if err != nil || name != "st-"+spec.suffix {
			t.Errorf("%s TableName = %q (%v), want ${AWS::StackName}-%s", id, name, err, spec.suffix)
		}
		if got := p["BillingMode"]; got != "PAY_PER_REQUEST" {
			t.Errorf("%s BillingMode = %v, want PAY_PER_REQUEST", id, got)
		}
		wantKey := []any{map[string]any{"AttributeName": partitionKey, "KeyType": "HASH"}}
		if diff := cmp.Diff(wantKey, p["KeySchema"]); diff != "" {
			t.Errorf("%s KeySchema mismatch (-want +got):\n%s", id, diff)
		}
		wantAttrs := []any{map[string]any{"AttributeName": partitionKey, "AttributeType": "S"}}
		if diff := cmp.Diff(wantAttrs, p["AttributeDefinitions"]); diff != "" {
			t.Errorf("%s AttributeDefinitions mismatch (-want +got):\n%s", id, diff)
		}
		if _, ok := p["GlobalSecondaryIndexes"]; ok {
			t.Errorf("%s has GlobalSecondaryIndexes; the design has none (and samtemplate.Tables ignores them)", id)
		}
		ttl := ""
		if m := mapOf(p["TimeToLiveSpecification"]); m != nil {
			if m["Enabled"] != true {
				t.Errorf("%s TimeToLiveSpecification.Enabled = %v, want true", id, m["Enabled"])
			}
			ttl, _ = m["AttributeName"].(string)
		}
		if ttl != spec.ttl {
			t.Errorf("%s TTL attribute = %q, want %q", id, ttl, spec.ttl)
		}
		stream, _ := mapOf(p["StreamSpecification"])["StreamViewType"].(string)
		if stream != spec.stream {
			t.Errorf("%s StreamViewType = %q, want %q", id, stream, spec.stream)
		}
		if got := mapOf(p["SSESpecification"])["SSEEnabled"]; got != true {
			t.Errorf("%s SSESpecification.SSEEnabled = %v, want true", id, got)
		}
		if got := mapOf(p["PointInTimeRecoverySpecification"])["PointInTimeRecoveryEnabled"]; got != true {
			t.Errorf("%s PointInTimeRecoveryEnabled = %v, want true", id, got)
		}
		// RetainExceptOnCreate: kept on stack deletion and replacement, but
		// removed when the stack's first creation rolls back, so that a retry
		// does not collide with the table names.
		for policy, want := range map[string]string{"DeletionPolicy": "RetainExceptOnCreate", "UpdateReplacePolicy": "Retain"} {
			if got := r.Raw[policy]; spec.retain && got != want {
				t.Errorf("%s %s = %v, want %s (it holds money state)", id, policy, got, want)
			}
		}
	}
	if got := tables["ProviderTable"].Raw["Condition"]; got != "DeployProvider" {
		t.Errorf("ProviderTable Condition = %v, want DeployProvider (only demo stacks have the simulator)", got)
	}
}

// TestTablesMatchCode compares the key and TTL attributes with the code's
// constants where the code has them.
func TestTablesMatchCode(t *testing.T) {
	tests := []struct {
		table string
		dir   string // package declaring the constant
		name  string // constant
		want  string // the template's value
	}{
		{"IdempotencyTable", "idempotency/dynamo", "AttrPK", partitionKey},
		{"IdempotencyTable", "idempotency/dynamo", "AttrExpiresAt", designTables["IdempotencyTable"].ttl},
		{"PaymentsTable", "internal/payments", "KeyAttr", partitionKey},
		{"RefundsTable", "internal/refunds", "KeyAttr", partitionKey},
		{"ApiKeysTable", "internal/auth", "attrPK", partitionKey},
		{"OutboxTable", "internal/outbox", "KeyAttr", partitionKey},
	}
	for _, tt := range tests {
		consts := stringConsts(t, filepath.Join(root(t), tt.dir), regexp.MustCompile("^"+tt.name+"$"))
		got, ok := consts[tt.name]
		if !ok {
			t.Errorf("%s: %s.%s not found; the test compares %s's key to it", tt.table, tt.dir, tt.name, tt.table)
			continue
		}
		if got != tt.want {
			t.Errorf("%s: %s.%s = %q, template says %q", tt.table, tt.dir, tt.name, got, tt.want)
		}
	}

	// The devstack's default table names are those of a stack named "once",
	// the stack name of samconfig.toml.
	defaults := stringConsts(t, filepath.Join(root(t), "internal", "config"), regexp.MustCompile(`^Default\w+Table$`))
	tables, err := template(t).Tables(samconfigStackName(t))
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, tbl := range tables {
		want = append(want, aws.ToString(tbl.Input.TableName))
	}
	for _, v := range defaults {
		got = append(got, v)
	}
	sort.Strings(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config.Default*Table mismatch with the template's tables for stack %q (-template +config):\n%s", samconfigStackName(t), diff)
	}
}

// TestTablesRoundTrip creates every table through samtemplate.Tables and
// samtemplate.Create (what the devstack and dynamotest use) in DynamoDB Local
// and compares what DynamoDB reports with the template.
func TestTablesRoundTrip(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	tables := template(t).ResourcesOfType("AWS::DynamoDB::Table")
	if diff := cmp.Diff(sortedKeys(tables), sortedKeys(names.ByLogicalID)); diff != "" {
		t.Fatalf("tables created mismatch (-template +created):\n%s", diff)
	}
	for id, name := range names.ByLogicalID {
		p := tables[id].Properties
		d, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		var keys, attrs []any
		for _, k := range d.Table.KeySchema {
			keys = append(keys, map[string]any{"AttributeName": aws.ToString(k.AttributeName), "KeyType": string(k.KeyType)})
		}
		for _, a := range d.Table.AttributeDefinitions {
			attrs = append(attrs, map[string]any{"AttributeName": aws.ToString(a.AttributeName), "AttributeType": string(a.AttributeType)})
		}
		if diff := cmp.Diff(p["KeySchema"], any(keys)); diff != "" {
			t.Errorf("%s KeySchema mismatch (-template +DynamoDB):\n%s", id, diff)
		}
		if diff := cmp.Diff(p["AttributeDefinitions"], any(attrs)); diff != "" {
			t.Errorf("%s AttributeDefinitions mismatch (-template +DynamoDB):\n%s", id, diff)
		}
		if d.Table.BillingModeSummary == nil || d.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("%s BillingModeSummary = %+v, want PAY_PER_REQUEST", id, d.Table.BillingModeSummary)
		}
		wantStream, _ := mapOf(p["StreamSpecification"])["StreamViewType"].(string)
		gotStream := ""
		if s := d.Table.StreamSpecification; s != nil && aws.ToBool(s.StreamEnabled) {
			gotStream = string(s.StreamViewType)
		}
		if gotStream != wantStream {
			t.Errorf("%s stream = %q, template says %q", id, gotStream, wantStream)
		}
		ttl, err := client.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		wantTTL, _ := mapOf(p["TimeToLiveSpecification"])["AttributeName"].(string)
		gotTTL := ""
		if desc := ttl.TimeToLiveDescription; desc != nil && desc.TimeToLiveStatus == types.TimeToLiveStatusEnabled {
			gotTTL = aws.ToString(desc.AttributeName)
		}
		if gotTTL != wantTTL {
			t.Errorf("%s TTL attribute = %q, template says %q", id, gotTTL, wantTTL)
		}
	}
}

// TestDevstackUsesTemplate checks that cmd/devstack builds its tables with
// samtemplate (Load or Parse, then Tables).
func TestDevstackUsesTemplate(t *testing.T) {
	if m, _ := filepath.Glob(filepath.Join(root(t), "cmd", "devstack", "*.go")); len(m) == 0 {
		t.Fatal("cmd/devstack has no Go files")
	}
	module := modulePath(t)
	s, err := scanMain(goListDeps(t, root(t), module, "./cmd/devstack"), module+"/cmd/devstack", module+"/internal/config")
	if err != nil {
		t.Fatal(err)
	}
	pkg := module + "/internal/samtemplate"
	if !(s.Qualified[pkg+".Load"] || s.Qualified[pkg+".Parse"]) || !s.Selected["Tables"] {
		t.Errorf("cmd/devstack does not create its tables with samtemplate (Load/Parse + Tables)")
	}
}
