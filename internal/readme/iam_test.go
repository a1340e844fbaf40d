package readme

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oncehq/once/internal/samtemplate"
)

// iamRecorder is a reverse proxy to DynamoDB that records the IAM actions
// each call needs on each table. IAM authorizes a TransactWriteItems item by
// item (PutItem, UpdateItem, DeleteItem, ConditionCheckItem on the item's
// table), a TransactGetItems as GetItem on each table, and a BatchGetItem or
// BatchWriteItem on each table it names.
type iamRecorder struct {
	mu   sync.Mutex
	need map[string]map[string]bool // table name -> action -> seen
	errs []error
}

// newIAMRecorder starts the proxy in front of endpoint and returns it with
// its URL.
func newIAMRecorder(t *testing.T, endpoint string) (*iamRecorder, string) {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rec := &iamRecorder{need: map[string]map[string]bool{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		rec.record(r.Header.Get("X-Amz-Target"), body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// record notes the actions of one call.
func (rec *iamRecorder) record(target string, body []byte) {
	op, ok := strings.CutPrefix(target, "DynamoDB_20120810.")
	var in struct {
		TableName     string
		IndexName     string
		RequestItems  map[string]json.RawMessage
		TransactItems []map[string]struct{ TableName string }
	}
	err := json.Unmarshal(body, &in)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !ok || err != nil {
		rec.errs = append(rec.errs, fmt.Errorf("a call the recorder cannot read: target %q: %v", target, err))
		return
	}
	add := func(table, action string) {
		if rec.need[table] == nil {
			rec.need[table] = map[string]bool{}
		}
		rec.need[table]["dynamodb:"+action] = true
	}
	itemAction := map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
	switch op {
	case "TransactWriteItems", "TransactGetItems":
		for _, item := range in.TransactItems {
			for kind, x := range item {
				action, known := itemAction[kind]
				if !known {
					rec.errs = append(rec.errs, fmt.Errorf("%s with an item of kind %q", op, kind))
					continue
				}
				add(x.TableName, action)
			}
		}
	case "BatchGetItem", "BatchWriteItem":
		for table := range in.RequestItems {
			add(table, op)
		}
	case "Query", "Scan":
		// IAM authorizes a read of an index on the index's ARN, not the
		// table's: the recorder names it apart, so no table grant covers it.
		if in.IndexName != "" {
			add(in.TableName+"/index/"+in.IndexName, op)
			return
		}
		add(in.TableName, op)
	default:
		add(in.TableName, op)
	}
}

// violations returns a line for each action recorded on a table that no
// statement of grants (logical ID -> actions) allows on it, and for each
// call the recorder could not read; names maps the tables' logical IDs to
// their names. checked counts the (table, action) pairs recorded.
func (rec *iamRecorder) violations(grants map[string]map[string]bool, names map[string]string) (out []string, checked int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, err := range rec.errs {
		out = append(out, err.Error())
	}
	logical := map[string]string{}
	for id, name := range names {
		logical[name] = id
	}
	for _, table := range slices.Sorted(maps.Keys(rec.need)) {
		id, ok := logical[table]
		if !ok {
			out = append(out, fmt.Sprintf("a call on %q, not a table of the template entries", table))
			continue
		}
		for _, action := range slices.Sorted(maps.Keys(rec.need[table])) {
			checked++
			if !grants[id][action] {
				out = append(out, fmt.Sprintf("%s on %s, which the Policies do not grant (granted on it: %v)", action, id, slices.Sorted(maps.Keys(grants[id]))))
			}
		}
	}
	return out, checked
}

// policyGrants reads fn's Policies: a list of {Statement: [...]} documents
// whose statements Allow a list of actions on !GetAtt <logical ID>.Arn.
func policyGrants(fn samtemplate.Function) (map[string]map[string]bool, error) {
	grants := map[string]map[string]bool{}
	policies, ok := fn.Properties["Policies"].([]any)
	if !ok {
		return nil, fmt.Errorf("Policies = %#v, want a list of policy documents", fn.Properties["Policies"])
	}
	for _, p := range policies {
		doc, _ := p.(map[string]any)
		statements, ok := doc["Statement"].([]any)
		if !ok {
			return nil, fmt.Errorf("policy %#v: want a document with a Statement list", p)
		}
		for _, s := range statements {
			st, _ := s.(map[string]any)
			refs := samtemplate.Refs(st["Resource"])
			actions, _ := st["Action"].([]any)
			if st["Effect"] != "Allow" || len(refs) != 1 || refs[0].Attribute != "Arn" || len(actions) == 0 {
				return nil, fmt.Errorf("statement %#v: want Effect Allow, a list of actions and Resource !GetAtt <table>.Arn", s)
			}
			for _, a := range actions {
				action, _ := a.(string)
				if grants[refs[0].Name] == nil {
					grants[refs[0].Name] = map[string]bool{}
				}
				grants[refs[0].Name][action] = true
			}
		}
	}
	return grants, nil
}

func TestIAMRecorder(t *testing.T) {
	fn := samtemplate.Function{Properties: map[string]any{"Policies": []any{map[string]any{"Statement": []any{
		map[string]any{"Effect": "Allow", "Action": []any{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:Query"}, "Resource": map[string]any{"Fn::GetAtt": []any{"Records", "Arn"}}},
		map[string]any{"Effect": "Allow", "Action": []any{"dynamodb:PutItem"}, "Resource": map[string]any{"Fn::GetAtt": []any{"Notes", "Arn"}}},
	}}}}}
	names := map[string]string{"Records": "records-t", "Notes": "notes-t"}
	grants, err := policyGrants(fn)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, target, body string
		wantErr            bool
	}{
		{"a put granted", "DynamoDB_20120810.PutItem", `{"TableName":"records-t"}`, false},
		{"a transaction of granted puts", "DynamoDB_20120810.TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"records-t"}},{"Put":{"TableName":"notes-t"}}]}`, false},
		{"an update in a transaction", "DynamoDB_20120810.TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"records-t"}},{"Update":{"TableName":"notes-t"}}]}`, true},
		{"a delete not granted", "DynamoDB_20120810.DeleteItem", `{"TableName":"records-t"}`, true},
		{"a get on the wrong table", "DynamoDB_20120810.GetItem", `{"TableName":"notes-t"}`, true},
		{"a batch get not granted", "DynamoDB_20120810.BatchGetItem", `{"RequestItems":{"records-t":{}}}`, true},
		{"another table", "DynamoDB_20120810.PutItem", `{"TableName":"elsewhere"}`, true},
		{"a query of the table", "DynamoDB_20120810.Query", `{"TableName":"records-t"}`, false},
		{"a query of an index", "DynamoDB_20120810.Query", `{"TableName":"records-t","IndexName":"by-tenant"}`, true},
		{"unreadable", "DynamoDB_20120810.PutItem", `{`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &iamRecorder{need: map[string]map[string]bool{}}
			rec.record(tt.target, []byte(tt.body))
			got, _ := rec.violations(grants, names)
			if failed := len(got) > 0; failed != tt.wantErr {
				t.Errorf("violations = %q, want some: %v (recorded %v)", got, tt.wantErr, rec.need)
			}
		})
	}
}
