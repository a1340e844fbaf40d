package dynamotest

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

func TestTablesFromTemplate(t *testing.T) {
	c := Client(t)
	names := Tables(t, c)
	for _, name := range []string{names.Idempotency, names.Payments, names.APIKeys, names.Provider} {
		if name == "" {
			t.Fatalf("Tables() = %+v, want every table named", names)
		}
	}
	ttl, err := c.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(names.Idempotency)})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != "expires_at" {
		t.Errorf("TTL attribute = %q, want expires_at", got)
	}
	d, err := c.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(names.Payments)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Table.LatestStreamArn == nil {
		t.Errorf("payments table has no stream")
	}
}
