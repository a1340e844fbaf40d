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
	name, err := String(p["TableName"], vars)
	if err != nil {
		return Table{}, fmt.Errorf("TableName: %w", err)
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

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
