package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamoclient/streamsclient"
	"github.com/oncehq/once/internal/samtemplate"
)

// Names holds the per-test table names.
type Names struct {
	// ByLogicalID has every table the template defines, by logical ID.
	ByLogicalID map[string]string
	// env maps each variable that template.yaml sets to !Ref <a table> to
	// that table's name.
	env map[string]string
}

// Env returns the environment a function would see for these tables: each
// variable that template.yaml sets for a function to !Ref <a table>
// (ONCE_PAYMENTS_TABLE: !Ref PaymentsTable) with the per-test name of that
// table. The map is the caller's, to add the rest of the environment to.
func (n Names) Env() map[string]string {
	out := make(map[string]string, len(n.env))
	for k, v := range n.env {
		out[k] = v
	}
	return out
}

// Endpoint returns the DynamoDB Local endpoint, skipping (or, under
// ONCE_REQUIRE_DYNAMODB=1, failing) the test when none is configured.
func Endpoint(t testing.TB) string {
	t.Helper()
	e := os.Getenv("ONCE_TEST_DYNAMODB_ENDPOINT")
	if e == "" {
		if os.Getenv("ONCE_REQUIRE_DYNAMODB") == "1" {
			t.Fatal("ONCE_REQUIRE_DYNAMODB=1 but ONCE_TEST_DYNAMODB_ENDPOINT is not set")
		}
		t.Skip("ONCE_TEST_DYNAMODB_ENDPOINT not set; run `make test` to run against DynamoDB Local")
	}
	return e
}

// Config returns the AWS config for the test endpoint.
func Config(t testing.TB) aws.Config {
	t.Helper()
	cfg, err := dynamoclient.Config(context.Background(), dynamoclient.Options{Endpoint: Endpoint(t)})
	if err != nil {
		t.Fatalf("dynamoclient.Config: %v", err)
	}
	return cfg
}

// Client returns a DynamoDB client for the test endpoint.
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamoclient.New(Config(t), Endpoint(t))
}

// Streams returns a DynamoDB Streams client for the test endpoint.
func Streams(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	return streamsclient.New(Config(t), Endpoint(t))
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// Tables creates every table of template.yaml under names unique to t and
// deletes them when the test ends.
func Tables(t testing.TB, client *dynamodb.Client) Names {
	t.Helper()
	names, tables := plan(t, client)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := samtemplate.Create(ctx, client, tables); err != nil {
		t.Fatal(err)
	}
	return names
}

// FreshNames returns names unique to t for every table of template.yaml
// without creating the tables, for code under test that creates them itself
// (the devstack), and deletes the tables of those names when the test ends.
func FreshNames(t testing.TB, client *dynamodb.Client) Names {
	t.Helper()
	names, _ := plan(t, client)
	return names
}

// plan names the template's tables for t, with their variables (see Env),
// and deletes the tables of those names when the test ends.
func plan(t testing.TB, client *dynamodb.Client) (Names, []samtemplate.Table) {
	t.Helper()
	tmpl, err := samtemplate.Load(TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	prefix := unsafe.ReplaceAllString(t.Name(), "_")
	if len(prefix) > 150 {
		prefix = prefix[len(prefix)-150:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	stack := strings.Trim(prefix, "_.-") + "-" + hex.EncodeToString(b[:])
	tables, err := tmpl.Tables(stack)
	if err != nil {
		t.Fatal(err)
	}
	names := Names{ByLogicalID: map[string]string{}, env: map[string]string{}}
	for _, tbl := range tables {
		name := aws.ToString(tbl.Input.TableName)
		names.ByLogicalID[tbl.LogicalID] = name
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		})
	}
	for _, fn := range tmpl.Functions() {
		for variable, v := range fn.Environment() {
			m, _ := v.(map[string]any)
			ref, _ := m["Ref"].(string)
			if name, ok := names.ByLogicalID[ref]; ok && len(m) == 1 {
				names.env[variable] = name
			}
		}
	}
	return names, tables
}

// Item returns the item of table whose key pk (the key of every table of
// template.yaml) is pk, as DynamoDB holds it (a consistent read). It fails t
// when there is none.
func Item(t testing.TB, client *dynamodb.Client, table, pk string) map[string]types.AttributeValue {
	t.Helper()
	item := get(t, client, table, pk)
	if len(item) == 0 {
		t.Fatalf("GetItem(%s): no item", pk)
	}
	return item
}

// Exists reports whether table holds an item whose key pk is pk (a
// consistent read).
func Exists(t testing.TB, client *dynamodb.Client, table, pk string) bool {
	t.Helper()
	return len(get(t, client, table, pk)) > 0
}

// get reads the item of table whose key is pk, consistently: nil when there
// is none.
func get(t testing.TB, client *dynamodb.Client, table, pk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            key(pk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem(%s): %v", pk, err)
	}
	return out.Item
}

// Delete deletes the item of table whose key is pk, unconditionally, as
// DynamoDB's TTL process does.
func Delete(t testing.TB, client *dynamodb.Client, table, pk string) {
	t.Helper()
	_, err := client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key(pk)})
	if err != nil {
		t.Fatalf("DeleteItem(%s): %v", pk, err)
	}
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}

// TemplatePath returns the path of the repository's template.yaml.
func TemplatePath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("dynamotest: cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "template.yaml")
}
