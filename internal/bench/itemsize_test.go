package bench

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestItemSize(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	tests := []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"empty", nil, 0},
		{"string: name and UTF-8 bytes", map[string]types.AttributeValue{"pk": s("é")}, 2 + 2},
		{"number of three digits", map[string]types.AttributeValue{"n": n("123")}, 1 + 3},
		{"number: trailing zeros trimmed", map[string]types.AttributeValue{"n": n("1000")}, 1 + 2},
		{"number: leading zeros and sign trimmed", map[string]types.AttributeValue{"n": n("-0.0015")}, 1 + 2},
		{"number with an exponent", map[string]types.AttributeValue{"n": n("1.25E+10")}, 1 + 3},
		{"binary: raw bytes", map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: make([]byte, 10)}}, 1 + 10},
		{"bool", map[string]types.AttributeValue{"ok": &types.AttributeValueMemberBOOL{Value: true}}, 2 + 1},
		{"null", map[string]types.AttributeValue{"x": &types.AttributeValueMemberNULL{Value: true}}, 1 + 1},
		{"empty map", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{}}, 1 + 3},
		{"map: 3 bytes, then each element's name, value and byte", map[string]types.AttributeValue{
			"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": s("v")}},
		}, 1 + 3 + (1 + 1 + 1)},
		{"list", map[string]types.AttributeValue{
			"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("ab"), n("1")}},
		}, 1 + 3 + (1 + 2) + (1 + 2)},
		{"string set", map[string]types.AttributeValue{"ss": &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}}, 2 + 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ItemSize(tt.item); got != tt.want {
				t.Errorf("ItemSize(%v) = %d, want %d", tt.item, got, tt.want)
			}
		})
	}
}

func TestWriteUnits(t *testing.T) {
	tests := []struct {
		size int
		want float64
	}{{0, 1}, {1, 1}, {1024, 1}, {1025, 2}, {400 << 10, 400}}
	for _, tt := range tests {
		if got := writeUnits(tt.size); got != tt.want {
			t.Errorf("writeUnits(%d) = %v, want %v", tt.size, got, tt.want)
		}
	}
}
