package recovery

import (
	"fmt"

	"github.com/oncehq/once/idempotency/internal/nilness"
)

// storeError says why a recovery function's Store (named config.Store in
// the message) cannot be used: it is missing (nil, or an interface holding
// a nil pointer), or its Validate method (dynamo.Store.Validate: no client,
// no table name) reports it misconfigured, as idempotency.New refuses it.
// Refused at start-up, it does not panic, nor fail every record, later.
func storeError(config string, store any) error {
	if nilness.Nil(store) {
		return fmt.Errorf("recovery: %s.Store is required", config)
	}
	if v, ok := store.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("recovery: %s.Store: %w", config, err)
		}
	}
	return nil
}
