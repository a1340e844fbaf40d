package samtemplate

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Template is a parsed template. Intrinsic functions are kept in their long
// form: !Ref X becomes {"Ref": "X"}, !Sub s becomes {"Fn::Sub": s},
// !GetAtt A.B becomes {"Fn::GetAtt": ["A", "B"]}.
type Template struct {
	// Doc is the whole document.
	Doc map[string]any
}

// Resource is one entry of the Resources section.
type Resource struct {
	// LogicalID is the resource's key in Resources.
	LogicalID string
	// Type is the resource type (AWS::DynamoDB::Table, ...).
	Type string
	// Properties are the resource's properties.
	Properties map[string]any
	// Raw is the whole resource entry (Condition, DependsOn, Metadata, ...).
	Raw map[string]any
}

// Load parses the template file at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %s: %w", path, err)
	}
	return t, nil
}

// Parse parses a template document.
func Parse(data []byte) (*Template, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("empty template")
	}
	v, err := decode(root.Content[0])
	if err != nil {
		return nil, err
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template is not a mapping")
	}
	return &Template{Doc: doc}, nil
}

// decode turns a YAML node into plain Go values, expanding short-form tags.
func decode(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.AliasNode:
		return decode(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", n.Content[i].Line, k)
			}
			val, err := decode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k] = val
		}
		v = m
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			val, err := decode(c)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		v = s
	case yaml.ScalarNode:
		if err := n.Decode(&v); err != nil {
			// A custom tag on a scalar: decode it as a plain string.
			v = n.Value
		}
		if isShortTag(n.Tag) {
			v = n.Value
		}
	default:
		return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	if !isShortTag(n.Tag) {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref", "Condition":
		return map[string]any{name: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			parts := strings.SplitN(s, ".", 2)
			if len(parts) != 2 {
				return nil, fmt.Errorf("line %d: !GetAtt %q is not Resource.Attribute", n.Line, s)
			}
			v = []any{parts[0], parts[1]}
		}
	}
	return map[string]any{"Fn::" + name: v}, nil
}

func isShortTag(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

// Section returns a top-level section (Resources, Parameters, Outputs, ...).
func (t *Template) Section(name string) map[string]any {
	m, _ := t.Doc[name].(map[string]any)
	return m
}

// Resources returns every resource, keyed by logical ID.
func (t *Template) Resources() map[string]Resource {
	out := map[string]Resource{}
	for id, raw := range t.Section("Resources") {
		m, _ := raw.(map[string]any)
		typ, _ := m["Type"].(string)
		props, _ := m["Properties"].(map[string]any)
		out[id] = Resource{LogicalID: id, Type: typ, Properties: props, Raw: m}
	}
	return out
}

// ResourcesOfType returns the resources of one type, keyed by logical ID.
func (t *Template) ResourcesOfType(typ string) map[string]Resource {
	out := map[string]Resource{}
	for id, r := range t.Resources() {
		if r.Type == typ {
			out[id] = r
		}
	}
	return out
}

// ParameterDefaults returns each parameter's Default, as a string.
func (t *Template) ParameterDefaults() map[string]string {
	out := map[string]string{}
	for name, raw := range t.Section("Parameters") {
		m, _ := raw.(map[string]any)
		if d, ok := m["Default"]; ok {
			out[name] = fmt.Sprint(d)
		}
	}
	return out
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// String evaluates a value that must resolve to a string: a plain string,
// {"Ref": name} or {"Fn::Sub": ...}, with vars giving the values of
// parameters and pseudo parameters (AWS::StackName, AWS::Region, ...).
func String(v any, vars map[string]string) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int, float64, bool:
		return fmt.Sprint(x), nil
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok {
			val, ok := vars[ref]
			if !ok {
				return "", fmt.Errorf("samtemplate: !Ref %s has no value", ref)
			}
			return val, nil
		}
		if sub, ok := x["Fn::Sub"]; ok {
			return substitute(sub, vars)
		}
	}
	return "", fmt.Errorf("samtemplate: cannot evaluate %v to a string", v)
}

func substitute(sub any, vars map[string]string) (string, error) {
	local := map[string]string{}
	for k, v := range vars {
		local[k] = v
	}
	var text string
	switch s := sub.(type) {
	case string:
		text = s
	case []any:
		if len(s) != 2 {
			return "", fmt.Errorf("samtemplate: !Sub list must have two items")
		}
		text, _ = s[0].(string)
		m, _ := s[1].(map[string]any)
		for k, v := range m {
			val, err := String(v, vars)
			if err != nil {
				return "", err
			}
			local[k] = val
		}
	default:
		return "", fmt.Errorf("samtemplate: bad !Sub %v", sub)
	}
	var missing []string
	out := subVar.ReplaceAllStringFunc(text, func(m string) string {
		name := m[2 : len(m)-1]
		if v, ok := local[name]; ok {
			return v
		}
		missing = append(missing, name)
		return m
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("samtemplate: !Sub %q: no value for %s", text, strings.Join(missing, ", "))
	}
	return strings.ReplaceAll(out, "${!", "${"), nil
}
