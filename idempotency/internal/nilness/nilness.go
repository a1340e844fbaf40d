package nilness

import "reflect"

// Nil reports whether v is nil or holds a nil pointer or a nil function. A
// nil map, slice or channel is not refused: its methods may well work.
func Nil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Func:
		return rv.IsNil()
	default:
		return false
	}
}
