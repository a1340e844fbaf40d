package nilness_test

import (
	"net/http"
	"testing"

	"github.com/oncehq/once/idempotency/internal/nilness"
)

type pointerCounter struct{}

func (*pointerCounter) Count(...string) {}

type mapCounter map[string]int

func (mapCounter) Count(...string) {}

type counter interface{ Count(...string) }

func TestNil(t *testing.T) {
	var nilCounter counter
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"nil", nil, true},
		{"a nil interface", nilCounter, true},
		{"a nil pointer", (*pointerCounter)(nil), true},
		{"a nil pointer in an interface", counter((*pointerCounter)(nil)), true},
		{"a nil HandlerFunc in an interface", http.Handler(http.HandlerFunc(nil)), true},
		{"a pointer", &pointerCounter{}, false},
		{"a HandlerFunc", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), false},
		{"a nil map (its methods may work)", mapCounter(nil), false},
		{"a struct", struct{}{}, false},
		{"zero", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nilness.Nil(tt.v); got != tt.want {
				t.Errorf("Nil(%#v) = %v, want %v", tt.v, got, tt.want)
			}
		})
	}
}
