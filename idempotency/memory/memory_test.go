package memory_test

import (
	"testing"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (idempotency.Store, storetest.Inspect) {
		s := memory.New()
		const table = "payments"
		return s, storetest.Inspect{
			EffectTable: table,
			Effects: func(t *testing.T) map[string]storetest.EffectItem {
				t.Helper()
				out := map[string]storetest.EffectItem{}
				for k, v := range s.Items(table) {
					item, ok := v.(storetest.EffectItem)
					if !ok {
						t.Fatalf("item %q is a %T, want a storetest.EffectItem", k, v)
					}
					out[k] = item
				}
				return out
			},
			Insert: func(item storetest.EffectItem) idempotency.Effect { return memory.Insert(table, item.PK, item) },
			Require: func(pk string, reject error) idempotency.Effect {
				return memory.Require(table, pk, reject)
			},
		}
	})
}
