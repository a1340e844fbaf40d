package jsonbody

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/oncehq/once/idempotency/problem"
)

func TestObject(t *testing.T) {
	tests := []struct {
		name, body string
		wantField  string // "" with wantErr: the body as a whole
		wantErr    bool
		wantNames  []string
	}{
		{"members in order", `{"b":1,"a":{"x":[1,{"y":2}]}}`, "", false, []string{"b", "a"}},
		{"not an object", `[1]`, "", true, nil},
		{"not JSON", `{"a":`, "", true, nil},
		{"two values", `{} {}`, "", true, nil},
		{"duplicate member", `{"a":1,"a":2}`, "a", true, nil},
		{"duplicate nested member", `{"a":{"b":1,"b":2}}`, "a.b", true, nil},
		{"lone surrogate", `{"a":"\ud800"}`, "", true, nil},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "", true, nil},
		{"missing required", `{"b":1}`, "a", true, nil},
		{"too deep", `{"a":` + nest(MaxDepth+1) + `}`, "", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			err := Object([]byte(tt.body), []string{"a"}, func(name string, raw json.RawMessage) error {
				names = append(names, name)
				return nil
			})
			var fe *problem.FieldError
			switch {
			case !tt.wantErr && err != nil:
				t.Fatalf("Object() = %v, want nil", err)
			case tt.wantErr && !errors.As(err, &fe):
				t.Fatalf("Object() = %v, want a *problem.FieldError", err)
			case tt.wantErr && tt.wantField != "" && fe.Field != tt.wantField:
				t.Errorf("Object() field = %q, want %q", fe.Field, tt.wantField)
			}
			if !tt.wantErr && len(names) != len(tt.wantNames) {
				t.Errorf("members %v, want %v", names, tt.wantNames)
			}
		})
	}
}

func nest(n int) string {
	s := "1"
	for range n {
		s = "[" + s + "]"
	}
	return s
}

// FuzzObject: Object never panics, fails only with a *problem.FieldError,
// and accepts only bodies encoding/json accepts as an object.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"a":"\ud83d\ude00"}`, `[]`, `{"a":{"b":[{"c":null}]}}`, "{\"a\":\"\xc3\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := Object(body, nil, func(string, json.RawMessage) error { return nil })
		if err != nil {
			var fe *problem.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Object(%q) = %v, want a *problem.FieldError", body, err)
			}
			return
		}
		var v map[string]any
		if json.Unmarshal(body, &v) != nil {
			t.Fatalf("Object accepted %q, which encoding/json does not decode as an object", body)
		}
	})
}
