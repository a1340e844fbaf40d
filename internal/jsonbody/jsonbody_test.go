package jsonbody

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

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
		{"member with an empty name", `{"a":1,"":2}`, "", true, nil},
		{"nested member with an empty name", `{"a":{"":1}}`, "", false, []string{"a"}},
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

// TestObjectRaw: each member's raw value is the value's bytes as the body
// has them, without the blanks and the colon around it.
func TestObjectRaw(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // name, raw, name, raw...
	}{
		{"compact", `{"a":1,"b":"x"}`, []string{"a", "1", "b", `"x"`}},
		{"blanks", "{ \"a\" :\t1 ,\r\n\"b\"\n:\n{ \"x\" : [ 1, 2 ] }\n}", []string{"a", "1", "b", `{ "x" : [ 1, 2 ] }`}},
		{"every kind", `{"s":"a\"b","n":-1.5e3,"t":true,"f":false,"z":null,"o":{},"l":[]}`,
			[]string{"s", `"a\"b"`, "n", "-1.5e3", "t", "true", "f", "false", "z", "null", "o", "{}", "l", "[]"}},
		{"escaped name", `{"\u0061":1}`, []string{"a", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := Object([]byte(tt.body), nil, func(name string, raw json.RawMessage) error {
				got = append(got, name, string(raw))
				return nil
			})
			if err != nil {
				t.Fatalf("Object() = %v, want nil", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
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
		var v map[string]json.RawMessage
		if json.Unmarshal(body, &v) != nil {
			t.Fatalf("Object accepted %q, which encoding/json does not decode as an object", body)
		}
		got := map[string]json.RawMessage{}
		_ = Object(body, nil, func(name string, raw json.RawMessage) error {
			got[name] = raw
			return nil
		})
		if diff := cmp.Diff(v, got); diff != "" {
			t.Fatalf("Object(%q) members (-encoding/json +Object):\n%s", body, diff)
		}
	})
}

// BenchmarkObject measures the decode of the peers harness's payment body.
func BenchmarkObject(b *testing.B) {
	body := []byte(`{"amount": 1234, "currency": "usd", "customer": "cus_1"}`)
	required := []string{"amount", "currency", "customer"}
	b.ReportAllocs()
	for b.Loop() {
		if err := Object(body, required, func(string, json.RawMessage) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
