package auth_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/dynamotest"
)

func TestKeys(t *testing.T) {
	client := dynamotest.Client(t)
	table := dynamotest.Tables(t, client).ByLogicalID["ApiKeysTable"]
	ctx := t.Context()

	pairs, err := auth.ParsePairs(auth.DefaultDevAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Seed(ctx, client, table, pairs); err != nil {
		t.Fatalf("Seed = %v", err)
	}
	keys := auth.NewKeys(client, table)

	t.Run("lookup", func(t *testing.T) {
		for _, p := range pairs {
			got, err := keys.Lookup(ctx, p.Key)
			if err != nil || got != p.Tenant {
				t.Errorf("Lookup(%q) = %q, %v, want %q, nil", p.Key, got, err, p.Tenant)
			}
		}
	})
	t.Run("unknown", func(t *testing.T) {
		for _, key := range []string{"sk_test_nobody", "", "SK_TEST_ACME"} {
			got, err := keys.Lookup(ctx, key)
			if !errors.Is(err, auth.ErrUnknownKey) {
				t.Errorf("Lookup(%q) = %q, %v, want ErrUnknownKey", key, got, err)
			}
		}
	})
	t.Run("stored hashed", func(t *testing.T) {
		out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) != len(pairs) {
			t.Fatalf("table has %d items, want %d", len(out.Items), len(pairs))
		}
		want := map[string]string{}
		for _, p := range pairs {
			want[auth.Hash(p.Key)] = p.Tenant
		}
		for _, item := range out.Items {
			pk := item["pk"].(*types.AttributeValueMemberS).Value
			tenant := item["tenant"].(*types.AttributeValueMemberS).Value
			if want[pk] != tenant {
				t.Errorf("item pk %q has tenant %q, want %q", pk, tenant, want[pk])
			}
			if _, ok := item["created"].(*types.AttributeValueMemberN); !ok {
				t.Errorf("item %q has no numeric created", pk)
			}
		}
	})
	t.Run("seed again", func(t *testing.T) {
		if err := auth.Seed(ctx, client, table, pairs); err != nil {
			t.Errorf("second Seed = %v, want nil (idempotent)", err)
		}
	})
	t.Run("seed taken key", func(t *testing.T) {
		err := auth.Seed(ctx, client, table, []auth.Pair{{Tenant: "globex", Key: "sk_test_acme"}})
		if !errors.Is(err, auth.ErrKeyTaken) {
			t.Fatalf("Seed(acme's key for globex) = %v, want ErrKeyTaken", err)
		}
		if got, err := keys.Lookup(ctx, "sk_test_acme"); got != "acme" || err != nil {
			t.Errorf("Lookup(sk_test_acme) after refused seed = %q, %v, want acme, nil", got, err)
		}
	})
	t.Run("invalid item", func(t *testing.T) {
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: auth.Hash("sk_broken")},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := keys.Lookup(ctx, "sk_broken")
		if err == nil || errors.Is(err, auth.ErrUnknownKey) {
			t.Errorf("Lookup(item without tenant) = %q, %v, want another error", got, err)
		}
	})
}

func TestKeysTableMissing(t *testing.T) {
	client := dynamotest.Client(t)
	keys := auth.NewKeys(client, "once-test-no-such-table")
	got, err := keys.Lookup(t.Context(), "sk_test_acme")
	if err == nil || errors.Is(err, auth.ErrUnknownKey) || got != "" {
		t.Errorf("Lookup on a missing table = %q, %v, want \"\" and an error other than ErrUnknownKey", got, err)
	}
	err = auth.Seed(t.Context(), client, "once-test-no-such-table", []auth.Pair{{Tenant: "acme", Key: "k"}})
	if err == nil {
		t.Error("Seed on a missing table = nil, want an error")
	}
}
