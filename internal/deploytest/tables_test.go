package deploytest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/samtemplate"
)

// partitionKey is the key of every table: a single string pk (dynamotest.Item
// and the operators' tools rely on it).
const partitionKey = "pk"

// tableID is the form of a table's logical ID: capitalised words and Table,
// so that config.TableEnv and config.TableDefault derive its variable and
// its default name.
var tableID = regexp.MustCompile(`^([A-Z][a-z0-9]+)+Table$`)

// disposable are the tables a stack may lose with its deletion. Every other
// table holds state to keep: DeletionPolicy RetainExceptOnCreate (kept on
// stack deletion and replacement, but removed when the stack's first
// creation rolls back, so that a retry does not collide with the table
// names) and UpdateReplacePolicy Retain.
var disposable = map[string]string{
	"ProviderTable": "the simulator's state, in demo stacks only",
	"OutboxTable":   "receipt jobs, each kept a week once sent",
}

// TestTables holds every table of the template to the rules that make it
// derivable: its logical ID, its name (${AWS::StackName}- and the words of
// its ID, as config.TableDefault names it in the stack config.DefaultStack,
// samconfig.toml's), on-demand billing, the key pk, SSE and PITR on,
// retained unless disposable, named by some function's environment, and a
// stream (NEW_AND_OLD_IMAGES, as the handlers read both images) exactly when
// a function's DynamoDB event reads it.
func TestTables(t *testing.T) {
	if got := samconfigStackName(t); got != config.DefaultStack {
		t.Errorf("samconfig.toml stack_name = %q, want config.DefaultStack, %q: the devstack's default table names are that stack's", got, config.DefaultStack)
	}
	tables := template(t).ResourcesOfType("AWS::DynamoDB::Table")
	if len(tables) == 0 {
		t.Fatal("the template has no tables")
	}
	named, streamed := map[string]bool{}, map[string]bool{}
	for _, fn := range template(t).Functions() {
		for _, v := range fn.Environment() {
			for _, r := range samtemplate.Refs(v) {
				named[r.Name] = true
			}
		}
		for _, ev := range fn.Events() {
			if ev.Type == "DynamoDB" {
				for _, r := range samtemplate.Refs(ev.Properties["Stream"]) {
					streamed[r.Name] = true
				}
			}
		}
	}
	for id := range disposable {
		if _, ok := tables[id]; !ok {
			t.Errorf("disposable names %s, which the template does not define", id)
		}
	}
	for _, id := range sortedKeys(tables) {
		r := tables[id]
		p := r.Properties
		if !tableID.MatchString(id) {
			t.Errorf("%s: logical ID does not match %s", id, tableID)
		}
		suffix := strings.TrimPrefix(config.TableDefault(id), config.DefaultStack+"-")
		name, err := samtemplate.String(p["TableName"], map[string]string{"AWS::StackName": "st"})
		if err != nil || name != "st-"+suffix {
			t.Errorf("%s TableName = %q (%v), want ${AWS::StackName}-%s", id, name, err, suffix)
		}
		if !named[id] {
			t.Errorf("%s: no function's environment names it (%s: !Ref %s)", id, config.TableEnv(id), id)
		}
		if got := p["BillingMode"]; got != "PAY_PER_REQUEST" {
			t.Errorf("%s BillingMode = %v, want PAY_PER_REQUEST", id, got)
		}
		wantKey := []any{map[string]any{"AttributeName": partitionKey, "KeyType": "HASH"}}
		if diff := cmp.Diff(wantKey, p["KeySchema"]); diff != "" {
			t.Errorf("%s KeySchema mismatch (-want +got):\n%s", id, diff)
		}
		if m := mapOf(p["TimeToLiveSpecification"]); m != nil && m["Enabled"] != true {
			t.Errorf("%s TimeToLiveSpecification.Enabled = %v, want true", id, m["Enabled"])
		}
		stream, _ := mapOf(p["StreamSpecification"])["StreamViewType"].(string)
		switch {
		case streamed[id] && stream != "NEW_AND_OLD_IMAGES":
			t.Errorf("%s StreamViewType = %q, want NEW_AND_OLD_IMAGES: a function's DynamoDB event reads its stream", id, stream)
		case !streamed[id] && stream != "":
			t.Errorf("%s has a stream (%s) that no function reads", id, stream)
		}
		if got := mapOf(p["SSESpecification"])["SSEEnabled"]; got != true {
			t.Errorf("%s SSESpecification.SSEEnabled = %v, want true", id, got)
		}
		if got := mapOf(p["PointInTimeRecoverySpecification"])["PointInTimeRecoveryEnabled"]; got != true {
			t.Errorf("%s PointInTimeRecoveryEnabled = %v, want true", id, got)
		}
		if _, ok := disposable[id]; !ok {
			for policy, want := range map[string]string{"DeletionPolicy": "RetainExceptOnCreate", "UpdateReplacePolicy": "Retain"} {
				if got := r.Raw[policy]; got != want {
					t.Errorf("%s %s = %v, want %s (or list it in disposable, saying why)", id, policy, got, want)
				}
			}
		}
	}
	if got := tables["ProviderTable"].Raw["Condition"]; got != "DeployProvider" {
		t.Errorf("ProviderTable Condition = %v, want DeployProvider (only demo stacks have the simulator)", got)
	}
}

// tableCode is where the code names a table's key attribute and its TTL
// attribute, for the tables that do not follow the convention: a table
// XyzTable belongs to the package internal/xyz, which declares its key as
// KeyAttr and, when it has one, its TTL attribute as TTLAttr. A zero entry
// means the code has no such constants.
var tableCode = map[string]struct{ dir, key, ttl string }{
	"IdempotencyTable": {dir: "idempotency/dynamo", key: "AttrPK", ttl: "AttrExpiresAt"},
	"ApiKeysTable":     {dir: "internal/auth", key: "attrPK"},
	"ProviderTable":    {}, // the simulator's own state, in emulation code
}

// TestTablesMatchCode compares each table's key attribute and TTL attribute
// with the code's constants (see tableCode): the constants must exist, and
// the TTL constant exactly when the table has TTL.
func TestTablesMatchCode(t *testing.T) {
	for _, id := range sortedKeys(template(t).ResourcesOfType("AWS::DynamoDB::Table")) {
		code, ok := tableCode[id]
		if !ok {
			code.dir = "internal/" + strings.ToLower(strings.TrimSuffix(id, "Table"))
			code.key, code.ttl = "KeyAttr", "TTLAttr"
		}
		if code.dir == "" {
			continue
		}
		p := template(t).Resources()[id].Properties
		key, _ := mapOf(list(p["KeySchema"])[0])["AttributeName"].(string)
		ttl, _ := mapOf(p["TimeToLiveSpecification"])["AttributeName"].(string)
		got, ok := constValue(t, code.dir, code.key)
		switch {
		case !ok:
			t.Errorf("%s: %s declares no string constant %s; declare the table's key there, or say in tableCode where the code names it", id, code.dir, code.key)
		case got != key:
			t.Errorf("%s: %s.%s = %q, the template's key is %q", id, code.dir, code.key, got, key)
		}
		got, ok = constValue(t, code.dir, code.ttl)
		switch {
		case ok && got != ttl:
			t.Errorf("%s: %s.%s = %q, the template's TTL attribute is %q", id, code.dir, code.ttl, got, ttl)
		case !ok && ttl != "":
			t.Errorf("%s: the template enables TTL on %q, but %s declares no %s: the code that sets it should name it", id, ttl, code.dir, code.ttl)
		}
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
		var wantIndexes, gotIndexes []any
		for _, g := range list(p["GlobalSecondaryIndexes"]) {
			wantIndexes = append(wantIndexes, g)
		}
		for _, g := range d.Table.GlobalSecondaryIndexes {
			idx := map[string]any{"IndexName": aws.ToString(g.IndexName)}
			var keys []any
			for _, k := range g.KeySchema {
				keys = append(keys, map[string]any{"AttributeName": aws.ToString(k.AttributeName), "KeyType": string(k.KeyType)})
			}
			idx["KeySchema"] = keys
			proj := map[string]any{"ProjectionType": string(g.Projection.ProjectionType)}
			if len(g.Projection.NonKeyAttributes) > 0 {
				var attrs []any
				for _, a := range g.Projection.NonKeyAttributes {
					attrs = append(attrs, a)
				}
				proj["NonKeyAttributes"] = attrs
			}
			idx["Projection"] = proj
			gotIndexes = append(gotIndexes, idx)
		}
		byName := cmpopts.SortSlices(func(a, b any) bool { return fmt.Sprint(mapOf(a)["IndexName"]) < fmt.Sprint(mapOf(b)["IndexName"]) })
		if diff := cmp.Diff(wantIndexes, gotIndexes, byName); diff != "" {
			t.Errorf("%s GlobalSecondaryIndexes mismatch (-template +DynamoDB):\n%s", id, diff)
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
