package samtemplate

import (
	"encoding/json"
	"strings"
	"testing"
)

// The examples of the Lambda developer guide's "Filter rule syntax" table
// (invocation-eventfiltering.html) and of the EventBridge content filtering
// page that Lambda shares, each with events that must and must not match.
func TestMatchPattern(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		match   []string
		noMatch []string
	}{
		{
			name:    "null",
			pattern: `{"UserID": [null]}`,
			match:   []string{`{"UserID": null}`},
			noMatch: []string{`{}`, `{"UserID": ""}`, `{"UserID": "null"}`, `{"UserID": 0}`},
		},
		{
			name:    "empty",
			pattern: `{"LastName": [""]}`,
			match:   []string{`{"LastName": ""}`},
			noMatch: []string{`{}`, `{"LastName": null}`, `{"LastName": " "}`},
		},
		{
			name:    "equals",
			pattern: `{"Name": ["Alice"]}`,
			match:   []string{`{"Name": "Alice"}`, `{"Name": "Alice", "Other": 1}`},
			noMatch: []string{`{"Name": "alice"}`, `{"Name": "Alice "}`, `{}`, `{"name": "Alice"}`},
		},
		{
			name:    "equals-ignore-case",
			pattern: `{"Name": [{"equals-ignore-case": "alice"}]}`,
			match:   []string{`{"Name": "Alice"}`, `{"Name": "ALICE"}`, `{"Name": "alice"}`},
			noMatch: []string{`{"Name": "Alicia"}`, `{}`, `{"Name": 1}`},
		},
		{
			name:    "and",
			pattern: `{"Location": ["New York"], "Day": ["Monday"]}`,
			match:   []string{`{"Location": "New York", "Day": "Monday"}`},
			noMatch: []string{`{"Location": "New York", "Day": "Tuesday"}`, `{"Location": "New York"}`, `{"Day": "Monday"}`},
		},
		{
			name:    "or",
			pattern: `{"PaymentType": ["Credit", "Debit"]}`,
			match:   []string{`{"PaymentType": "Credit"}`, `{"PaymentType": "Debit"}`},
			noMatch: []string{`{"PaymentType": "Cash"}`, `{}`},
		},
		{
			name:    "or across fields",
			pattern: `{"$or": [{"Location": ["New York"]}, {"Day": ["Monday"]}]}`,
			match:   []string{`{"Location": "New York"}`, `{"Day": "Monday"}`, `{"Location": "New York", "Day": "Sunday"}`},
			noMatch: []string{`{"Location": "Boston", "Day": "Sunday"}`, `{}`},
		},
		{
			name:    "or combined with and",
			pattern: `{"source": ["a"], "$or": [{"x": [1]}, {"y": [2]}]}`,
			match:   []string{`{"source": "a", "x": 1}`, `{"source": "a", "y": 2}`},
			noMatch: []string{`{"source": "b", "x": 1}`, `{"source": "a", "x": 2}`},
		},
		{
			name:    "anything-but",
			pattern: `{"Weather": [{"anything-but": ["Raining"]}]}`,
			match:   []string{`{"Weather": "Sunny"}`, `{"Weather": "Cloudy"}`},
			noMatch: []string{`{"Weather": "Raining"}`, `{}`},
		},
		{
			name:    "anything-but single value",
			pattern: `{"state": [{"anything-but": "initializing"}]}`,
			match:   []string{`{"state": "running"}`},
			noMatch: []string{`{"state": "initializing"}`},
		},
		{
			name:    "anything-but numbers",
			pattern: `{"x-limit": [{"anything-but": [100, 200, 300]}]}`,
			match:   []string{`{"x-limit": 150}`, `{"x-limit": "100"}`},
			noMatch: []string{`{"x-limit": 100}`, `{"x-limit": 300.0}`},
		},
		{
			name:    "anything-but prefix",
			pattern: `{"state": [{"anything-but": {"prefix": "init"}}]}`,
			match:   []string{`{"state": "running"}`},
			noMatch: []string{`{"state": "initializing"}`, `{"state": "init"}`, `{}`},
		},
		{
			name:    "anything-but suffix",
			pattern: `{"FileName": [{"anything-but": {"suffix": ".txt"}}]}`,
			match:   []string{`{"FileName": "data.png"}`},
			noMatch: []string{`{"FileName": "notes.txt"}`},
		},
		{
			name:    "anything-but equals-ignore-case list",
			pattern: `{"Name": [{"anything-but": {"equals-ignore-case": ["alice", "bob"]}}]}`,
			match:   []string{`{"Name": "Carol"}`},
			noMatch: []string{`{"Name": "ALICE"}`, `{"Name": "Bob"}`},
		},
		{
			name:    "numeric equals",
			pattern: `{"Price": [{"numeric": ["=", 100]}]}`,
			match:   []string{`{"Price": 100}`, `{"Price": 100.0}`, `{"Price": 1e2}`},
			noMatch: []string{`{"Price": 101}`, `{"Price": "100"}`, `{}`},
		},
		{
			name:    "numeric range",
			pattern: `{"Price": [{"numeric": [">", 10, "<=", 20]}]}`,
			match:   []string{`{"Price": 11}`, `{"Price": 20}`, `{"Price": 10.5}`},
			noMatch: []string{`{"Price": 10}`, `{"Price": 20.01}`, `{"Price": -5}`},
		},
		{
			name:    "exists",
			pattern: `{"ProductName": [{"exists": true}]}`,
			match:   []string{`{"ProductName": "Widget"}`, `{"ProductName": ""}`, `{"ProductName": null}`},
			noMatch: []string{`{}`, `{"productname": "x"}`},
		},
		{
			name:    "does not exist",
			pattern: `{"ProductName": [{"exists": false}]}`,
			match:   []string{`{}`, `{"Other": 1}`},
			noMatch: []string{`{"ProductName": "Widget"}`, `{"ProductName": null}`},
		},
		{
			name:    "does not exist below an absent object",
			pattern: `{"detail": {"c-count": [{"exists": false}]}}`,
			match:   []string{`{}`, `{"detail": {}}`, `{"detail": "scalar"}`},
			noMatch: []string{`{"detail": {"c-count": 1}}`},
		},
		{
			name:    "begins with",
			pattern: `{"Region": [{"prefix": "us-"}]}`,
			match:   []string{`{"Region": "us-east-1"}`, `{"Region": "us-"}`},
			noMatch: []string{`{"Region": "eu-west-1"}`, `{"Region": "US-east-1"}`, `{"Region": "us"}`},
		},
		{
			name:    "begins with ignoring case",
			pattern: `{"Region": [{"prefix": {"equals-ignore-case": "us-"}}]}`,
			match:   []string{`{"Region": "US-east-1"}`},
			noMatch: []string{`{"Region": "eu-west-1"}`},
		},
		{
			name:    "ends with",
			pattern: `{"FileName": [{"suffix": ".png"}]}`,
			match:   []string{`{"FileName": "image.png"}`},
			noMatch: []string{`{"FileName": "image.jpg"}`, `{"FileName": "image.PNG"}`},
		},
		{
			name:    "wildcard",
			pattern: `{"EventBusArn": [{"wildcard": "arn:aws:events:us-east-1:*:event-bus/*"}]}`,
			match:   []string{`{"EventBusArn": "arn:aws:events:us-east-1:123456789012:event-bus/default"}`},
			noMatch: []string{`{"EventBusArn": "arn:aws:events:us-west-2:123456789012:event-bus/default"}`},
		},
		{
			name:    "wildcard with escaped star",
			pattern: `{"k": [{"wildcard": "a\\*b*"}]}`,
			match:   []string{`{"k": "a*b"}`, `{"k": "a*bcd"}`},
			noMatch: []string{`{"k": "axb"}`},
		},
		{
			name:    "cidr",
			pattern: `{"sourceIPAddress": [{"cidr": "10.0.0.0/24"}]}`,
			match:   []string{`{"sourceIPAddress": "10.0.0.255"}`},
			noMatch: []string{`{"sourceIPAddress": "10.0.1.0"}`, `{"sourceIPAddress": "nope"}`},
		},
		{
			name:    "booleans",
			pattern: `{"external": [true]}`,
			match:   []string{`{"external": true}`},
			noMatch: []string{`{"external": false}`, `{"external": "true"}`},
		},
		{
			name:    "array in the event matches if any element does",
			pattern: `{"resources": ["arn:b"]}`,
			match:   []string{`{"resources": ["arn:a", "arn:b"]}`},
			noMatch: []string{`{"resources": ["arn:a"]}`, `{"resources": []}`},
		},
		{
			name:    "nested pattern over an array of objects",
			pattern: `{"items": {"kind": ["x"]}}`,
			match:   []string{`{"items": [{"kind": "y"}, {"kind": "x"}]}`},
			noMatch: []string{`{"items": [{"kind": "y"}]}`},
		},
		{
			name:    "strings never match numbers",
			pattern: `{"n": ["5"]}`,
			match:   []string{`{"n": "5"}`},
			noMatch: []string{`{"n": 5}`},
		},
		{
			name:    "numbers match by value",
			pattern: `{"n": [5]}`,
			match:   []string{`{"n": 5}`, `{"n": 5.0}`},
			noMatch: []string{`{"n": "5"}`},
		},
		{
			// The example of the Lambda guide's DynamoDB section.
			name:    "DynamoDB keys",
			pattern: `{"dynamodb": {"Keys": {"CustomerName": {"S": ["AnyCompany Industries"]}}}}`,
			match:   []string{`{"eventName": "INSERT", "dynamodb": {"Keys": {"CustomerName": {"S": "AnyCompany Industries"}, "OrderID": {"N": "7"}}}}`},
			noMatch: []string{`{"eventName": "INSERT", "dynamodb": {"Keys": {"CustomerName": {"S": "Other"}}}}`},
		},
		{
			name:    "pattern keys must all match at every level",
			pattern: `{"dynamodb": {"NewImage": {"status": {"S": ["pending"]}, "amount": {"N": [{"exists": true}]}}}}`,
			match:   []string{`{"dynamodb": {"NewImage": {"status": {"S": "pending"}, "amount": {"N": "5"}}}}`},
			noMatch: []string{`{"dynamodb": {"NewImage": {"status": {"S": "pending"}}}}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := CompilePattern([]byte(tt.pattern))
			if err != nil {
				t.Fatalf("CompilePattern(%s) error: %v", tt.pattern, err)
			}
			for _, ev := range tt.match {
				if got, err := p.Match([]byte(ev)); err != nil || !got {
					t.Errorf("pattern %s: Match(%s) = %v, %v, want true", tt.pattern, ev, got, err)
				}
			}
			for _, ev := range tt.noMatch {
				if got, err := p.Match([]byte(ev)); err != nil || got {
					t.Errorf("pattern %s: Match(%s) = %v, %v, want false", tt.pattern, ev, got, err)
				}
			}
		})
	}
}

func TestCompilePatternErrors(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // a part of the error
	}{
		{`[]`, "not a JSON object"},
		{`{}`, "empty object"},
		{`{"a": "x"}`, "must be an object or a list"},
		{`{"a": []}`, "empty list"},
		{`{"a": [[1]]}`, "nested list"},
		{`{"a": [{"prefix": 1}]}`, "prefix takes a string"},
		{`{"a": [{"numeric": [">"]}]}`, "operator-number pairs"},
		{`{"a": [{"numeric": ["!=", 1]}]}`, "unknown operator"},
		{`{"a": [{"numeric": [">", "1"]}]}`, "is not a number"},
		{`{"a": [{"exists": "yes"}]}`, "exists takes true or false"},
		{`{"a": [{"unknown": 1}]}`, `unknown operator "unknown"`},
		{`{"a": [{"prefix": "x", "suffix": "y"}]}`, "exactly one key"},
		{`{"a": [{"anything-but": {"numeric": [">", 1]}}]}`, "unsupported operator"},
		{`{"a": [{"anything-but": [true]}]}`, "strings or numbers"},
		{`{"a": [{"wildcard": "a**b"}]}`, "consecutive wildcards"},
		{`{"a": [{"cidr": "10.0.0.0/33"}]}`, "cidr"},
		{`{"$or": [{"a": [1]}]}`, "at least two"},
		{`{"$or": [{"a": [1]}, "b"]}`, "not an object"},
		{`{"a": [1]} {}`, "trailing data"},
	}
	for _, tt := range tests {
		_, err := CompilePattern([]byte(tt.pattern))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CompilePattern(%s) error = %v, want one containing %q", tt.pattern, err, tt.want)
		}
	}
}

func TestMatchPatternBadEvent(t *testing.T) {
	if _, err := MatchPattern([]byte(`{"a": [1]}`), []byte(`[1]`)); err == nil {
		t.Errorf("MatchPattern(event [1]) error = nil, want one")
	}
	if _, err := MatchPattern([]byte(`{"a": [1]}`), []byte(`{`)); err == nil {
		t.Errorf("MatchPattern(event {) error = nil, want one")
	}
}

func TestMatchFilters(t *testing.T) {
	patterns := []string{`{"a": [1]}`, `{"b": [2]}`}
	for ev, want := range map[string]bool{`{"a": 1}`: true, `{"b": 2}`: true, `{"c": 3}`: false} {
		got, err := MatchFilters(patterns, []byte(ev))
		if err != nil || got != want {
			t.Errorf("MatchFilters(%q, %s) = %v, %v, want %v", patterns, ev, got, err, want)
		}
	}
	if got, err := MatchFilters(nil, []byte(`{}`)); err != nil || !got {
		t.Errorf("MatchFilters(nil) = %v, %v, want true (no FilterCriteria delivers everything)", got, err)
	}
}

func TestMatchAny(t *testing.T) {
	var patterns []*Pattern
	for _, s := range []string{`{"a": [1]}`, `{"b": [2]}`} {
		p, err := CompilePattern([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		patterns = append(patterns, p)
	}
	for ev, want := range map[string]bool{`{"a": 1}`: true, `{"b": 2}`: true, `{"c": 3}`: false} {
		got, err := MatchAny(patterns, []byte(ev))
		if err != nil || got != want {
			t.Errorf("MatchAny(%s) = %v, %v, want %v", ev, got, err, want)
		}
	}
	if got, err := MatchAny(nil, []byte(`{}`)); err != nil || !got {
		t.Errorf("MatchAny(nil) = %v, %v, want true (no FilterCriteria delivers everything)", got, err)
	}
	for _, ev := range []string{`[1]`, `{`} {
		if _, err := MatchAny(patterns, []byte(ev)); err == nil {
			t.Errorf("MatchAny(event %s) error = nil, want one", ev)
		}
	}
}

func TestFieldsOf(t *testing.T) {
	tests := []struct {
		patterns []string
		want     string
	}{
		{[]string{`{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"status": {"S": ["x"]}}}}`}, `{"dynamodb":{"NewImage":{"status":{"S":null}}},"eventName":null}`},
		{[]string{`{"a": {"b": ["x"]}}`, `{"a": ["y"]}`}, `{"a":null}`},
		{[]string{`{"a": ["y"]}`, `{"a": {"b": ["x"]}}`}, `{"a":null}`},
		{[]string{`{"$or": [{"a": {"b": ["x"]}}, {"a": {"c": ["x"]}, "d": ["z"]}]}`}, `{"a":{"b":null,"c":null},"d":null}`},
		{nil, `{}`},
	}
	for _, tt := range tests {
		var ps []*Pattern
		for _, s := range tt.patterns {
			p, err := CompilePattern([]byte(s))
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		got, err := json.Marshal(FieldsOf(ps))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("FieldsOf(%v) = %s, want %s", tt.patterns, got, tt.want)
		}
		// A document of only those fields matches as the whole event does.
		event := []byte(`{"eventName": "INSERT", "dynamodb": {"NewImage": {"status": {"S": "x"}}}, "a": {"b": "x", "c": "x"}, "d": "z", "e": 1}`)
		doc, err := DecodeDocument(event)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := MatchAny(ps, event)
		if err != nil {
			t.Fatal(err)
		}
		if MatchAnyDocument(ps, doc.(map[string]any)) != whole {
			t.Errorf("%v: MatchAnyDocument and MatchAny differ on %s", tt.patterns, event)
		}
	}
}
