package samtemplate

import (
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Table is a DynamoDB table defined by the template.
type Table struct {
	// LogicalID is the table's logical ID (IdempotencyTable, ...).
	LogicalID string
	// Input creates the table; its TableName is resolved for the stack.
	Input *dynamodb.CreateTableInput
	// TTLAttribute is the enabled TTL attribute, empty when none.
	TTLAttribute string
}

// Tables returns the template's AWS::DynamoDB::Table resources, sorted by
// logical ID, with names resolved for stackName (and parameter defaults).
func (t *Template) Tables(stackName string) ([]Table, error) {
	vars := t.ParameterDefaults()
	vars["AWS::StackName"] = stackName
	vars["AWS::Region"] = "us-east-1"
	vars["AWS::AccountId"] = "000000000000"
	vars["AWS::Partition"] = "aws"

	var out []Table
	for id, r := range t.ResourcesOfType("AWS::DynamoDB::Table") {
		tbl, err := table(id, r.Properties, vars)
		if err != nil {
			return nil, fmt.Errorf("samtemplate: %s: %w", id, err)
		}
		out = append(out, tbl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LogicalID < out[j].LogicalID })
	return out, nil
}

func table(id string, p map[string]any, vars map[string]string) (Table, error) {
	name := vars["AWS::StackName"] + "-" + id // CloudFormation names a table without TableName after the stack and its logical ID
	if _, ok := p["TableName"]; ok {
		var err error
		if name, err = String(p["TableName"], vars); err != nil {
			return Table{}, fmt.Errorf("TableName: %w", err)
		}
	}
	in := &dynamodb.CreateTableInput{TableName: aws.String(name)}
	if bm, _ := p["BillingMode"].(string); bm != "" {
		in.BillingMode = types.BillingMode(bm)
	}
	if in.BillingMode != types.BillingModePayPerRequest {
		return Table{}, fmt.Errorf("BillingMode must be PAY_PER_REQUEST, got %q", in.BillingMode)
	}
	for _, raw := range list(p["AttributeDefinitions"]) {
		m, _ := raw.(map[string]any)
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
			AttributeName: aws.String(str(m["AttributeName"])),
			AttributeType: types.ScalarAttributeType(str(m["AttributeType"])),
		})
	}
	for _, raw := range list(p["KeySchema"]) {
		m, _ := raw.(map[string]any)
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{
			AttributeName: aws.String(str(m["AttributeName"])),
			KeyType:       types.KeyType(str(m["KeyType"])),
		})
	}
	if len(in.KeySchema) == 0 || len(in.AttributeDefinitions) == 0 {
		return Table{}, fmt.Errorf("KeySchema and AttributeDefinitions are required")
	}
	for i, raw := range list(p["GlobalSecondaryIndexes"]) {
		gsi, err := index(raw)
		if err != nil {
			return Table{}, fmt.Errorf("GlobalSecondaryIndexes[%d]: %w", i, err)
		}
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, gsi)
	}
	if err := checkAttributes(in); err != nil {
		return Table{}, err
	}
	if s, ok := p["StreamSpecification"].(map[string]any); ok {
		in.StreamSpecification = &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: types.StreamViewType(str(s["StreamViewType"])),
		}
	}
	tbl := Table{LogicalID: id, Input: in}
	if ttl, ok := p["TimeToLiveSpecification"].(map[string]any); ok && ttl["Enabled"] == true {
		tbl.TTLAttribute = str(ttl["AttributeName"])
	}
	return tbl, nil
}

// index is one GlobalSecondaryIndexes entry (a table in PAY_PER_REQUEST mode:
// no ProvisionedThroughput).
func index(raw any) (types.GlobalSecondaryIndex, error) {
	m, _ := raw.(map[string]any)
	name := str(m["IndexName"])
	if name == "" {
		return types.GlobalSecondaryIndex{}, fmt.Errorf("IndexName is required")
	}
	gsi := types.GlobalSecondaryIndex{IndexName: aws.String(name)}
	for _, k := range list(m["KeySchema"]) {
		km, _ := k.(map[string]any)
		gsi.KeySchema = append(gsi.KeySchema, types.KeySchemaElement{
			AttributeName: aws.String(str(km["AttributeName"])),
			KeyType:       types.KeyType(str(km["KeyType"])),
		})
	}
	if len(gsi.KeySchema) == 0 {
		return types.GlobalSecondaryIndex{}, fmt.Errorf("%s: KeySchema is required", name)
	}
	proj, _ := m["Projection"].(map[string]any)
	pt := types.ProjectionType(str(proj["ProjectionType"]))
	if pt == "" {
		return types.GlobalSecondaryIndex{}, fmt.Errorf("%s: Projection.ProjectionType is required", name)
	}
	gsi.Projection = &types.Projection{ProjectionType: pt}
	for _, a := range list(proj["NonKeyAttributes"]) {
		gsi.Projection.NonKeyAttributes = append(gsi.Projection.NonKeyAttributes, str(a))
	}
	return gsi, nil
}

// checkAttributes holds the table to CloudFormation's rule: every key
// attribute of the table and its indexes is defined, and every definition is
// a key attribute.
func checkAttributes(in *dynamodb.CreateTableInput) error {
	defined := map[string]bool{}
	for _, d := range in.AttributeDefinitions {
		defined[aws.ToString(d.AttributeName)] = true
	}
	used := map[string]bool{}
	keys := in.KeySchema
	for _, g := range in.GlobalSecondaryIndexes {
		keys = append(keys, g.KeySchema...)
	}
	for _, k := range keys {
		name := aws.ToString(k.AttributeName)
		used[name] = true
		if !defined[name] {
			return fmt.Errorf("key attribute %s has no AttributeDefinitions entry", name)
		}
	}
	for name := range defined {
		if !used[name] {
			return fmt.Errorf("attribute %s is defined but is no key of the table or an index", name)
		}
	}
	return nil
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
