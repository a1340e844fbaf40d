package samtemplate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

const functionsDoc = `
Globals:
  Function:
    Runtime: provided.al2023
    Timeout: 10
    Architectures: [!Ref Architecture]
    Environment:
      Variables:
        LOG_LEVEL: !Ref LogLevel
        SHARED: global
Resources:
  ApiFunction:
    Type: AWS::Serverless::Function
    Condition: OnlySometimes
    Metadata:
      BuildMethod: makefile
    Properties:
      CodeUri: .
      Timeout: 30
      Environment:
        Variables:
          SHARED: local
          ONCE_TABLE: !Ref Table
      Events:
        B:
          Type: Api
          Properties: {Path: /b, Method: get}
        A:
          Type: DynamoDB
          Properties:
            FilterCriteria:
              Filters:
                - Pattern: '{"eventName": ["INSERT"]}'
                - Pattern: '{"eventName": ["REMOVE"]}'
  PlainFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: s3://bucket/key.zip
  Table:
    Type: AWS::DynamoDB::Table
`

func TestFunctions(t *testing.T) {
	tmpl, err := Parse([]byte(functionsDoc))
	if err != nil {
		t.Fatal(err)
	}
	fns := tmpl.Functions()
	if got, want := len(fns), 2; got != want {
		t.Fatalf("len(Functions()) = %d, want %d", got, want)
	}
	api := fns["ApiFunction"]
	if got, want := api.Properties["Timeout"], 30; got != want {
		t.Errorf("Timeout = %v, want %v (the function's own value wins)", got, want)
	}
	if got, want := api.Properties["Runtime"], "provided.al2023"; got != want {
		t.Errorf("Runtime = %v, want %v (from Globals)", got, want)
	}
	wantEnv := map[string]any{
		"LOG_LEVEL":  map[string]any{"Ref": "LogLevel"},
		"SHARED":     "local",
		"ONCE_TABLE": map[string]any{"Ref": "Table"},
	}
	if diff := cmp.Diff(wantEnv, api.Environment()); diff != "" {
		t.Errorf("Environment() mismatch (-want +got):\n%s", diff)
	}
	if got, want := api.BuildTarget(), "build-ApiFunction"; got != want {
		t.Errorf("BuildTarget() = %q, want %q", got, want)
	}
	if got, want := fns["PlainFunction"].BuildTarget(), ""; got != want {
		t.Errorf("PlainFunction BuildTarget() = %q, want %q", got, want)
	}
	if got, want := api.Condition(), "OnlySometimes"; got != want {
		t.Errorf("Condition() = %q, want %q", got, want)
	}
	if got := fns["PlainFunction"].Environment()["LOG_LEVEL"]; got == nil {
		t.Errorf("PlainFunction has no LOG_LEVEL from Globals")
	}
	evs := api.Events()
	if len(evs) != 2 || evs[0].Name != "A" || evs[1].Name != "B" || evs[0].Type != "DynamoDB" {
		t.Fatalf("Events() = %+v, want A (DynamoDB), B (Api)", evs)
	}
	pats, err := evs[0].FilterPatterns()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{`{"eventName": ["INSERT"]}`, `{"eventName": ["REMOVE"]}`}, pats); diff != "" {
		t.Errorf("FilterPatterns() mismatch (-want +got):\n%s", diff)
	}
	if pats, err := evs[1].FilterPatterns(); err != nil || pats != nil {
		t.Errorf("FilterPatterns() of an Api event = %v, %v, want nil, nil", pats, err)
	}
}

func TestMergeGlobals(t *testing.T) {
	tests := []struct {
		name          string
		global, local any
		want          any
	}{
		{"local scalar wins", 1, 2, 2},
		{"global only", 1, nil, 1},
		{"local only", nil, 2, 2},
		{"maps merge", map[string]any{"a": 1, "b": 1}, map[string]any{"b": 2, "c": 2}, map[string]any{"a": 1, "b": 2, "c": 2}},
		{"lists concatenate, globals first", []any{"g"}, []any{"l"}, []any{"g", "l"}},
		{"intrinsic replaces a map", map[string]any{"a": 1}, map[string]any{"Ref": "X"}, map[string]any{"Ref": "X"}},
		{"map replaces an intrinsic", map[string]any{"Fn::If": []any{}}, map[string]any{"a": 1}, map[string]any{"a": 1}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, MergeGlobals(tt.global, tt.local)); diff != "" {
			t.Errorf("%s: MergeGlobals mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestFunctionFolder(t *testing.T) {
	for id, folder := range map[string]string{
		"ApiFunction":        "api",
		"ReconcilerFunction": "reconciler",
		"Function":           "",
		"ApiHandler":         "",
	} {
		if got := FunctionFolder(id); got != folder {
			t.Errorf("FunctionFolder(%q) = %q, want %q", id, got, folder)
		}
	}
	for folder, id := range map[string]string{
		"api":        "ApiFunction",
		"worker2":    "Worker2Function",
		"":           "",
		"Api":        "",
		"my-handler": "",
		"1st":        "",
	} {
		if got := FunctionLogicalID(folder); got != id {
			t.Errorf("FunctionLogicalID(%q) = %q, want %q", folder, got, id)
		}
	}
}
