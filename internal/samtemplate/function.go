package samtemplate

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// Function is an AWS::Serverless::Function with the template's
// Globals.Function section applied, as the SAM transform applies it.
type Function struct {
	// LogicalID is the function's logical ID (ApiFunction, ...).
	LogicalID string
	// Properties are the function's properties merged with the globals.
	Properties map[string]any
	// Raw is the whole resource entry (Condition, Metadata, ...).
	Raw map[string]any
}

// Event is one entry of a function's Events property.
type Event struct {
	// Name is the event's key in Events.
	Name string
	// Type is the event source type (Api, DynamoDB, ...).
	Type string
	// Properties are the event's properties.
	Properties map[string]any
}

// Functions returns the template's AWS::Serverless::Function resources with
// the globals applied, keyed by logical ID.
func (t *Template) Functions() map[string]Function {
	globals, _ := t.Section("Globals")["Function"].(map[string]any)
	out := map[string]Function{}
	for id, r := range t.ResourcesOfType("AWS::Serverless::Function") {
		props, _ := MergeGlobals(globals, r.Properties).(map[string]any)
		out[id] = Function{LogicalID: id, Properties: props, Raw: r.Raw}
	}
	return out
}

// MergeGlobals merges a global value into a resource's value the way the SAM
// transform does: maps are merged key by key (recursively), lists are
// concatenated with the global entries first, and any other value, an
// intrinsic function included, is replaced by the resource's own.
func MergeGlobals(global, local any) any {
	if global == nil {
		return local
	}
	if local == nil {
		return global
	}
	if isIntrinsic(global) || isIntrinsic(local) {
		return local
	}
	switch g := global.(type) {
	case map[string]any:
		l, ok := local.(map[string]any)
		if !ok {
			return local
		}
		out := make(map[string]any, len(g)+len(l))
		for k, v := range g {
			out[k] = v
		}
		for k, v := range l {
			out[k] = MergeGlobals(g[k], v)
		}
		return out
	case []any:
		l, ok := local.([]any)
		if !ok {
			return local
		}
		return append(append([]any{}, g...), l...)
	}
	return local
}

// isIntrinsic reports whether v is an intrinsic function or a Ref (a map
// with the single key Ref, Condition or Fn::*).
func isIntrinsic(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// Environment returns the function's environment variables, globals
// included, unevaluated.
func (f Function) Environment() map[string]any {
	env, _ := f.Properties["Environment"].(map[string]any)
	vars, _ := env["Variables"].(map[string]any)
	if vars == nil {
		return map[string]any{}
	}
	return vars
}

// BuildTarget returns the make target that SAM's makefile builder runs for
// the function ("build-ApiFunction"), or "" when the function's Metadata does
// not say BuildMethod: makefile.
func (f Function) BuildTarget() string {
	md, _ := f.Raw["Metadata"].(map[string]any)
	if md["BuildMethod"] != "makefile" {
		return ""
	}
	return "build-" + f.LogicalID
}

// Condition returns the name of the condition the function is created under,
// or "" when it is always created.
func (f Function) Condition() string {
	c, _ := f.Raw["Condition"].(string)
	return c
}

// Events returns the function's events, sorted by name.
func (f Function) Events() []Event {
	m, _ := f.Properties["Events"].(map[string]any)
	var out []Event
	for name, raw := range m {
		e, _ := raw.(map[string]any)
		typ, _ := e["Type"].(string)
		props, _ := e["Properties"].(map[string]any)
		out = append(out, Event{Name: name, Type: typ, Properties: props})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// FilterPatterns returns the patterns of an event's FilterCriteria, in order.
func (e Event) FilterPatterns() ([]string, error) {
	fc, ok := e.Properties["FilterCriteria"]
	if !ok {
		return nil, nil
	}
	m, _ := fc.(map[string]any)
	var out []string
	for i, raw := range list(m["Filters"]) {
		f, _ := raw.(map[string]any)
		p, ok := f["Pattern"].(string)
		if !ok {
			return nil, fmt.Errorf("samtemplate: event %s: filter %d has no Pattern string", e.Name, i)
		}
		out = append(out, p)
	}
	return out, nil
}

// FunctionFolder returns the folder under functions/ that holds the code of
// the function with the given logical ID: ApiFunction -> "api". It returns
// "" when the ID does not follow the <Name>Function convention.
func FunctionFolder(logicalID string) string {
	name, ok := strings.CutSuffix(logicalID, "Function")
	if !ok || name == "" {
		return ""
	}
	return strings.ToLower(name)
}

// FunctionLogicalID returns the logical ID of the function whose code is in
// functions/<folder>: "api" -> ApiFunction. It returns "" for a folder name
// that is not a lower-case letter followed by lower-case letters and digits.
func FunctionLogicalID(folder string) string {
	if folder == "" || !unicode.IsLower(rune(folder[0])) {
		return ""
	}
	for _, r := range folder {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return ""
		}
	}
	return strings.ToUpper(folder[:1]) + folder[1:] + "Function"
}
