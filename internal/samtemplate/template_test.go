package samtemplate

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseShortTags(t *testing.T) {
	tmpl, err := Parse([]byte(`
Ref: !Ref X
Sub: !Sub "${AWS::StackName}-x"
SubList: !Sub ["${A}", {A: !Ref B}]
GetAtt: !GetAtt T.Arn
GetAttList: !GetAtt [T, StreamArn]
If: !If [C, !Ref A, !Ref "AWS::NoValue"]
Equals: !Equals [!Ref P, "true"]
Not: !Not [!Equals [!Ref P, ""]]
FindInMap: !FindInMap [M, !Ref K, V]
Select: !Select [2, !Split ["/", !Ref U]]
Join: !Join ["", [a, b]]
Condition: !Condition C
Plain: 10
Quoted: "true"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"Ref":        map[string]any{"Ref": "X"},
		"Sub":        map[string]any{"Fn::Sub": "${AWS::StackName}-x"},
		"SubList":    map[string]any{"Fn::Sub": []any{"${A}", map[string]any{"A": map[string]any{"Ref": "B"}}}},
		"GetAtt":     map[string]any{"Fn::GetAtt": []any{"T", "Arn"}},
		"GetAttList": map[string]any{"Fn::GetAtt": []any{"T", "StreamArn"}},
		"If":         map[string]any{"Fn::If": []any{"C", map[string]any{"Ref": "A"}, map[string]any{"Ref": "AWS::NoValue"}}},
		"Equals":     map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "P"}, "true"}},
		"Not":        map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "P"}, ""}}}},
		"FindInMap":  map[string]any{"Fn::FindInMap": []any{"M", map[string]any{"Ref": "K"}, "V"}},
		"Select":     map[string]any{"Fn::Select": []any{2, map[string]any{"Fn::Split": []any{"/", map[string]any{"Ref": "U"}}}}},
		"Join":       map[string]any{"Fn::Join": []any{"", []any{"a", "b"}}},
		"Condition":  map[string]any{"Condition": "C"},
		"Plain":      10,
		"Quoted":     "true",
	}
	if diff := cmp.Diff(want, tmpl.Doc); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"":                 "empty template",
		"- a":              "not a mapping",
		"a: 1\na: 2":       "duplicate key",
		"a: !GetAtt NoDot": "not Resource.Attribute",
		"a: [unterminated": "parse YAML",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want one containing %q", doc, err, want)
		}
	}
}

func TestString(t *testing.T) {
	vars := map[string]string{"AWS::StackName": "s", "Stage": "prod"}
	tests := []struct {
		in   any
		want string
	}{
		{"plain", "plain"},
		{5, "5"},
		{true, "true"},
		{map[string]any{"Ref": "Stage"}, "prod"},
		{map[string]any{"Fn::Sub": "${AWS::StackName}-${Stage}"}, "s-prod"},
		{map[string]any{"Fn::Sub": "${!Literal}-${Stage}"}, "${Literal}-prod"},
		{map[string]any{"Fn::Sub": []any{"${A}/${Stage}", map[string]any{"A": map[string]any{"Ref": "Stage"}}}}, "prod/prod"},
	}
	for _, tt := range tests {
		got, err := String(tt.in, vars)
		if err != nil || got != tt.want {
			t.Errorf("String(%v) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []any{
		map[string]any{"Ref": "Missing"},
		map[string]any{"Fn::Sub": "${Missing}"},
		map[string]any{"Fn::Sub": []any{"x"}},
		map[string]any{"Fn::GetAtt": []any{"A", "B"}},
		[]any{"x"},
	} {
		if got, err := String(bad, vars); err == nil {
			t.Errorf("String(%v) = %q, want an error", bad, got)
		}
	}
}

// TestTables checks the conversion without DynamoDB; internal/deploytest
// creates the tables in DynamoDB Local.
func TestTables(t *testing.T) {
	tmpl, err := Load("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := tmpl.Tables("st")
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) == 0 {
		t.Fatal("template.yaml defines no tables")
	}
	for _, tbl := range tables {
		if name := aws.ToString(tbl.Input.TableName); !strings.HasPrefix(name, "st-") {
			t.Errorf("%s TableName = %q, want the stack name st as its prefix", tbl.LogicalID, name)
		}
		if tbl.Input.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("%s BillingMode = %q, want PAY_PER_REQUEST", tbl.LogicalID, tbl.Input.BillingMode)
		}
	}

	bad, err := Parse([]byte(`
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: t
      BillingMode: PROVISIONED
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Tables("s"); err == nil || !strings.Contains(err.Error(), "PAY_PER_REQUEST") {
		t.Errorf("Tables(PROVISIONED) error = %v, want PAY_PER_REQUEST", err)
	}
}

func TestTableIndexes(t *testing.T) {
	tmpl, err := Parse([]byte(`
Resources:
  OrdersTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub "${AWS::StackName}-orders"
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: pk, AttributeType: S}
        - {AttributeName: tenant, AttributeType: S}
        - {AttributeName: created, AttributeType: N}
      KeySchema:
        - {AttributeName: pk, KeyType: HASH}
      GlobalSecondaryIndexes:
        - IndexName: by-tenant
          KeySchema:
            - {AttributeName: tenant, KeyType: HASH}
            - {AttributeName: created, KeyType: RANGE}
          Projection:
            ProjectionType: INCLUDE
            NonKeyAttributes: [status]
`))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := tmpl.Tables("st")
	if err != nil {
		t.Fatal(err)
	}
	want := []types.GlobalSecondaryIndex{{
		IndexName: aws.String("by-tenant"),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("tenant"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("created"), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"status"}},
	}}
	if diff := cmp.Diff(want, tables[0].Input.GlobalSecondaryIndexes, cmpopts.IgnoreUnexported(types.GlobalSecondaryIndex{}, types.KeySchemaElement{}, types.Projection{})); diff != "" {
		t.Errorf("GlobalSecondaryIndexes mismatch (-want +got):\n%s", diff)
	}

	for _, tt := range []struct{ name, props, want string }{
		{"undefined index key", `
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      GlobalSecondaryIndexes: [{IndexName: i, KeySchema: [{AttributeName: x, KeyType: HASH}], Projection: {ProjectionType: ALL}}]`, "x has no AttributeDefinitions"},
		{"unused definition", `
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}, {AttributeName: y, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]`, "y is defined"},
		{"no projection", `
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      GlobalSecondaryIndexes: [{IndexName: i, KeySchema: [{AttributeName: pk, KeyType: HASH}]}]`, "ProjectionType"},
	} {
		bad, err := Parse([]byte("Resources:\n  T:\n    Type: AWS::DynamoDB::Table\n    Properties:\n      TableName: t\n      BillingMode: PAY_PER_REQUEST" + tt.props + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if _, err := bad.Tables("s"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Tables() error = %v, want it to say %q", tt.name, err, tt.want)
		}
	}
}
