package dynamotest

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestTablesFromTemplate(t *testing.T) {
	c := Client(t)
	names := Tables(t, c)
	for _, id := range []string{"IdempotencyTable", "PaymentsTable", "ApiKeysTable", "ProviderTable"} {
		if names.ByLogicalID[id] == "" {
			t.Fatalf("Tables() = %+v, want every table named", names)
		}
	}
	ttl, err := c.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(names.ByLogicalID["IdempotencyTable"])})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != "expires_at" {
		t.Errorf("TTL attribute = %q, want expires_at", got)
	}
	d, err := c.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(names.ByLogicalID["PaymentsTable"])})
	if err != nil {
		t.Fatal(err)
	}
	if d.Table.LatestStreamArn == nil {
		t.Errorf("payments table has no stream")
	}
}

func TestItemAndDelete(t *testing.T) {
	c := Client(t)
	names := Tables(t, c)
	for id, table := range names.ByLogicalID {
		item := map[string]types.AttributeValue{
			"pk":   &types.AttributeValueMemberS{Value: "acme#1"},
			"note": &types.AttributeValueMemberS{Value: id},
		}
		if _, err := c.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatalf("%s: PutItem: %v", id, err)
		}
		if diff := cmp.Diff(item, Item(t, c, table, "acme#1"), cmpopts.IgnoreUnexported(types.AttributeValueMemberS{})); diff != "" {
			t.Errorf("%s: Item() (-want +got):\n%s", id, diff)
		}
		Delete(t, c, table, "acme#1")
		out, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("acme#1"), ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item != nil {
			t.Errorf("%s: GetItem after Delete = %v, %v; want no item", id, out.Item, err)
		}
	}
}

// TestEnv checks that Env gives each table variable of template.yaml the
// per-test name of the table it refers to, by the template's !Ref.
func TestEnv(t *testing.T) {
	names := FreshNames(t, Client(t))
	env := names.Env()
	want := map[string]string{
		"ONCE_IDEMPOTENCY_TABLE": names.ByLogicalID["IdempotencyTable"],
		"ONCE_API_KEYS_TABLE":    names.ByLogicalID["ApiKeysTable"],
		"ONCE_REFUNDS_TABLE":     names.ByLogicalID["RefundsTable"],
	}
	for k, v := range want {
		if v == "" || env[k] != v {
			t.Errorf("Env()[%s] = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(names.ByLogicalID) {
		t.Errorf("Env() has %d variables, want one per table (%d): %v", len(env), len(names.ByLogicalID), env)
	}
	env["X"] = "y"
	if _, ok := names.Env()["X"]; ok {
		t.Error("Env() returned a map shared with Names")
	}
}
