package samtemplate

import (
	"sort"
	"strings"
)

// Ref is a reference from a template value to a resource, a parameter or a
// pseudo parameter: !Ref X, !GetAtt X.Attr, or ${X} / ${X.Attr} in !Sub.
type Ref struct {
	// Name is the logical ID, parameter or pseudo parameter (AWS::Region).
	Name string
	// Attribute is the attribute of !GetAtt (Arn, StreamArn, ...), empty
	// for !Ref.
	Attribute string
}

// String formats r as it is written in !Sub: X or X.Attr.
func (r Ref) String() string {
	if r.Attribute == "" {
		return r.Name
	}
	return r.Name + "." + r.Attribute
}

// Refs returns every reference in v, however deeply nested, sorted and
// without duplicates. Variables that !Sub defines in its own map are not
// references; their values are searched instead.
func Refs(v any) []Ref {
	seen := map[Ref]bool{}
	collectRefs(v, seen)
	out := make([]Ref, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Attribute < out[j].Attribute
	})
	return out
}

func collectRefs(v any, seen map[Ref]bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			collectRefs(e, seen)
		}
	case map[string]any:
		if len(x) == 1 {
			if name, ok := x["Ref"].(string); ok {
				seen[Ref{Name: name}] = true
				return
			}
			if ga, ok := x["Fn::GetAtt"]; ok {
				if r, ok := getAtt(ga); ok {
					seen[r] = true
					return
				}
			}
			if sub, ok := x["Fn::Sub"]; ok {
				subRefs(sub, seen)
				return
			}
		}
		for _, e := range x {
			collectRefs(e, seen)
		}
	}
}

func getAtt(v any) (Ref, bool) {
	switch x := v.(type) {
	case string:
		id, attr, ok := strings.Cut(x, ".")
		return Ref{Name: id, Attribute: attr}, ok
	case []any:
		if len(x) != 2 {
			return Ref{}, false
		}
		id, ok1 := x[0].(string)
		attr, ok2 := x[1].(string)
		return Ref{Name: id, Attribute: attr}, ok1 && ok2
	}
	return Ref{}, false
}

func subRefs(sub any, seen map[Ref]bool) {
	var text string
	local := map[string]bool{}
	switch s := sub.(type) {
	case string:
		text = s
	case []any:
		if len(s) != 2 {
			return
		}
		text, _ = s[0].(string)
		m, _ := s[1].(map[string]any)
		for k, v := range m {
			local[k] = true
			collectRefs(v, seen)
		}
	}
	for _, m := range subVar.FindAllStringSubmatch(text, -1) {
		name := m[1]
		if local[name] {
			continue
		}
		if id, attr, ok := strings.Cut(name, "."); ok && !strings.HasPrefix(name, "AWS::") {
			seen[Ref{Name: id, Attribute: attr}] = true
			continue
		}
		seen[Ref{Name: name}] = true
	}
}
