package bench

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ItemSize is the size of item as DynamoDB counts it against the 400 KB item
// limit and for capacity units (Developer Guide, "Item sizes and formats"):
// the UTF-8 length of every attribute name plus its value's size. A string
// counts its UTF-8 bytes, a binary its raw bytes, a number one byte per two
// significant digits plus one, a Boolean or null one byte, a list or map
// three bytes plus its elements, each with one byte of overhead (and a map
// element its name), a set the sum of its elements. Storage billing adds 100
// bytes per item, which ItemSize leaves out.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += 1 + len(name) + valueSize(e)
		}
		return n
	}
	return 0
}

// numberSize is a number's size: its significant digits (leading and
// trailing zeros trimmed), one byte per two, plus one byte.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if mantissa, _, ok := strings.Cut(strings.ToLower(s), "e"); ok {
		s = mantissa
	}
	digits := strings.Replace(s, ".", "", 1)
	digits = strings.Trim(digits, "0")
	return (len(digits)+1)/2 + 1
}

// Capacity unit sizes: a write unit per KB written, a strongly consistent
// read unit per 4 KB read.
const (
	writeUnitBytes = 1024
	readUnitBytes  = 4096
)

// writeUnits is the write capacity of writing an item of size bytes: one unit
// per started KB, at least one.
func writeUnits(size int) float64 {
	return float64(max(1, (size+writeUnitBytes-1)/writeUnitBytes))
}
