package auth

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHash(t *testing.T) {
	// printf %s sk_test_acme | sha256sum
	const want = "0c24ce40313b1ce2b6daefa9dea10a4d3290af661123f6d499a3567b80d5ed49"
	if got := Hash("sk_test_acme"); got != want {
		t.Errorf("Hash(%q) = %q, want %q", "sk_test_acme", got, want)
	}
	if got := ShortHash("sk_test_acme"); got != want[:8] {
		t.Errorf("ShortHash(%q) = %q, want %q", "sk_test_acme", got, want[:8])
	}
}

func TestParsePairs(t *testing.T) {
	tests := []struct {
		in      string
		want    []Pair
		wantErr string // substring
	}{
		{in: DefaultDevAPIKeys, want: []Pair{{"acme", "sk_test_acme"}, {"globex", "sk_test_globex"}}},
		{in: " acme : sk_1 , b_2-c:sk:with:colons ", want: []Pair{{"acme", "sk_1"}, {"b_2-c", "sk:with:colons"}}},
		{in: "acme:k1,acme:k2", want: []Pair{{"acme", "k1"}, {"acme", "k2"}}},
		{in: "", wantErr: "no API keys"},
		{in: "  ", wantErr: "no API keys"},
		{in: "acme:k1,", wantErr: "entry 2 is empty"},
		{in: "acme", wantErr: "entry 1: want tenant:key"},
		{in: "Acme:k1", wantErr: `tenant "Acme" is not a tenant id`},
		{in: "-acme:k1", wantErr: `tenant "-acme" is not a tenant id`},
		{in: ":k1", wantErr: `tenant "" is not a tenant id`},
		{in: strings.Repeat("a", 65) + ":k1", wantErr: "is not a tenant id"},
		{in: "acme:", wantErr: "entry 1 (tenant \"acme\"): empty key"},
		{in: "acme:sk one", wantErr: "printable ASCII"},
		{in: "acme:k1,globex:k1", wantErr: "entry 2 (tenant \"globex\"): same key as entry 1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePairs(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePairs(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePairs(%q) error = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePairs(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParsePairsReportsEveryProblemWithoutKeys(t *testing.T) {
	_, err := ParsePairs("BAD:secret_one,ok:,x")
	if err == nil {
		t.Fatal("ParsePairs = nil error, want one")
	}
	for _, want := range []string{"entry 1", "entry 2", "entry 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePairs error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "secret_one") {
		t.Errorf("ParsePairs error %q contains the key", err)
	}
}
