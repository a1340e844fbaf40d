package devstack

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/samtemplate"
)

// filterPatterns are the template's FilterCriteria patterns, and patterns
// that read the record's fields every other way: whole objects, other
// attribute types, numbers, exists, $or, the change's scalar fields and
// userIdentity.
func filterPatterns(t testing.TB) [][]*samtemplate.Pattern {
	t.Helper()
	ms := templateMappings(t)
	var sets [][]*samtemplate.Pattern
	for _, m := range ms {
		if len(m.filters) > 0 {
			sets = append(sets, m.filters)
		}
	}
	if len(sets) < 3 {
		t.Fatalf("the template's mappings have %d filter sets; want at least 3", len(sets))
	}
	extra := []string{
		`{"eventName": [{"anything-but": ["REMOVE"]}], "awsRegion": [{"prefix": "us-"}]}`,
		`{"dynamodb": {"NewImage": {"amount": {"N": ["2500"]}}}}`,
		`{"dynamodb": {"NewImage": {"amount": {"N": [{"numeric": [">", 100]}]}}}}`,
		`{"dynamodb": {"NewImage": {"external": {"BOOL": [false]}}}}`,
		`{"dynamodb": {"NewImage": {"status": [{"exists": true}]}}}`,
		`{"dynamodb": {"OldImage": {"status": {"S": [{"exists": false}]}}}}`,
		`{"dynamodb": {"NewImage": {"data": {"M": {"k": {"S": ["v"]}}}}}}`,
		`{"dynamodb": {"NewImage": {"tags": {"L": {"S": ["a"]}}}}}`,
		`{"dynamodb": {"NewImage": {"tags": {"SS": ["a"]}}}}`,
		`{"dynamodb": {"Keys": {"pk": {"S": [{"prefix": "acme#"}]}}}}`,
		`{"dynamodb": {"StreamViewType": ["NEW_AND_OLD_IMAGES"], "SizeBytes": [{"numeric": [">=", 0]}]}}`,
		`{"dynamodb": {"SequenceNumber": [{"prefix": "1"}]}}`,
		`{"dynamodb": {"ApproximateCreationDateTime": [{"exists": true}]}}`,
		`{"dynamodb": [{"exists": true}]}`,
		`{"dynamodb": {"NewImage": [{"exists": false}]}}`,
		`{"dynamodb": {"NewImage": {"status": {"S": {"deeper": ["x"]}}}}}`,
		`{"userIdentity": {"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]}}`,
		`{"$or": [{"eventID": ["1"]}, {"eventSource": ["aws:dynamodb"], "eventVersion": ["1.1"]}], "eventSourceARN": [{"exists": true}]}`,
		`{"$or": [{"dynamodb": {"NewImage": {"status": {"S": ["COMPLETED"]}}}}, {"dynamodb": {"NewImage": ["x"]}}]}`,
		`{"unknown": [{"exists": false}], "dynamodb": {"Other": [{"exists": false}]}}`,
	}
	for _, p := range extra {
		c, err := samtemplate.CompilePattern([]byte(p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		sets = append(sets, []*samtemplate.Pattern{c})
	}
	return sets
}

// templateMappings are the stream mappings of the repository's template.
func templateMappings(t testing.TB) []mapping {
	t.Helper()
	tmpl, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mappingsFromTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

var filterRecordSeeds = []string{
	`{"awsRegion":"us-east-1","eventID":"1","eventName":"INSERT","eventSource":"aws:dynamodb","eventVersion":"1.1","eventSourceARN":"arn:x","dynamodb":{"ApproximateCreationDateTime":1795507370,"Keys":{"pk":{"S":"acme#k"}},"NewImage":{"pk":{"S":"acme#k"},"status":{"S":"IN_PROGRESS"},"external":{"BOOL":true},"amount":{"N":"2500"}},"SequenceNumber":"100","SizeBytes":120,"StreamViewType":"NEW_AND_OLD_IMAGES"}}`,
	`{"eventName":"MODIFY","dynamodb":{"NewImage":{"status":{"S":"UNKNOWN"},"data":{"M":{"k":{"S":"v"}}},"tags":{"L":[{"S":"a"},{"N":"1"}]}},"OldImage":{"status":{"S":"IN_PROGRESS"}}}}`,
	`{"eventName":"REMOVE","userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},"dynamodb":{"Keys":{"pk":{"S":"acme#k"}},"OldImage":{"status":{"S":"IN_PROGRESS"},"tags":{"SS":["a","b"]}}}}`,
	`{"eventName":"INSERT","dynamodb":{"NewImage":{"kind":{"S":"receipt"},"status":{"N":"5"},"body":{"B":"AAE="},"none":{"NULL":true}}}}`,
	`{"eventName":"INSERT","dynamodb":{"NewImage":{"status":{"S":"pending"}}}}`,
	`{"eventName":"INSERT","dynamodb":{"NewImage":{"status":{"M":{"S":{"S":"pending"}}}}}}`,
	`{}`,
}

// FuzzRecordDocument holds the stream filter's document to the record's
// JSON: for every set of patterns, a record matches its document exactly
// when it matches its whole JSON, as Lambda reads it.
func FuzzRecordDocument(f *testing.F) {
	sets := filterPatterns(f)
	for _, s := range filterRecordSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec events.DynamoDBEventRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return
		}
		whole, err := json.Marshal(rec)
		if err != nil {
			return // the filter lets such a record through either way
		}
		for _, set := range sets {
			want, err := samtemplate.MatchAny(set, whole)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := recordDocument(rec, samtemplate.FieldsOf(set))
			if err != nil {
				t.Fatalf("recordDocument: %v (the record's JSON encodes: %s)", err, whole)
			}
			if got := samtemplate.MatchAnyDocument(set, doc); got != want {
				t.Fatalf("record %s: document %v matches %v, the record's JSON %v", whole, doc, got, want)
			}
		}
	})
}

// TestMappingFilters: the template's own patterns on the records the
// functions must and must not see, through the mapping's filter.
func TestMappingFilters(t *testing.T) {
	byFunc := map[string]mapping{}
	for _, m := range templateMappings(t) {
		byFunc[m.function] = m
	}
	rec := func(name, image, status string) events.DynamoDBEventRecord {
		r := events.DynamoDBEventRecord{EventName: name}
		img := map[string]events.DynamoDBAttributeValue{"status": events.NewStringAttribute(status), "kind": events.NewStringAttribute(status)}
		if image == "new" {
			r.Change.NewImage = img
		} else {
			r.Change.OldImage = img
		}
		return r
	}
	tests := []struct {
		function string
		rec      events.DynamoDBEventRecord
		want     bool
	}{
		{"WorkerFunction", rec("INSERT", "new", "pending"), true},
		{"WorkerFunction", rec("MODIFY", "new", "pending"), false},
		{"WorkerFunction", rec("INSERT", "new", "succeeded"), false},
		{"SweeperFunction", rec("INSERT", "new", "IN_PROGRESS"), true},
		{"SweeperFunction", rec("MODIFY", "new", "IN_PROGRESS"), true},
		{"SweeperFunction", rec("INSERT", "new", "UNKNOWN"), true},
		{"SweeperFunction", rec("MODIFY", "new", "UNKNOWN"), true},
		{"SweeperFunction", rec("MODIFY", "new", "COMPLETED"), false},
		{"SweeperFunction", rec("REMOVE", "old", "IN_PROGRESS"), true},
		{"SweeperFunction", rec("REMOVE", "old", "COMPLETED"), false},
		{"SweeperFunction", rec("INSERT", "new", "COMPLETED"), false},
		{"ReconcilerFunction", rec("MODIFY", "new", "UNKNOWN"), true},
		{"ReconcilerFunction", rec("MODIFY", "new", "COMPLETED"), false},
		{"ReceiptsFunction", rec("INSERT", "new", "receipt"), true},
		{"ReceiptsFunction", rec("MODIFY", "new", "receipt"), false},
	}
	for _, tt := range tests {
		m, ok := byFunc[tt.function]
		if !ok {
			t.Fatalf("no stream mapping for %s", tt.function)
		}
		if got := m.filter()(tt.rec); got != tt.want {
			t.Errorf("%s: %s %v: passes %v, want %v", tt.function, tt.rec.EventName, tt.rec.Change, got, tt.want)
		}
	}
}
