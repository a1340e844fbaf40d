package samtemplate

import (
	"bytes"
	"fmt"
	"sort"

	"gopkg.in/yaml.v3"
)

// SetCodeURIs returns the template document data with the CodeUri of each
// function in uris (logical ID -> URI, such as s3://bucket/key.zip) replaced,
// as `sam package` does. Everything else, short-form tags and comments
// included, is kept. It fails when a logical ID names no resource with a
// CodeUri.
func SetCodeURIs(data []byte, uris map[string]string) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("samtemplate: parse YAML: %w", err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("samtemplate: template is not a mapping")
	}
	resources := mapValue(root.Content[0], "Resources")
	if resources == nil || resources.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("samtemplate: template has no Resources")
	}
	ids := make([]string, 0, len(uris))
	for id := range uris {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		codeURI := mapValue(mapValue(mapValue(resources, id), "Properties"), "CodeUri")
		if codeURI == nil {
			return nil, fmt.Errorf("samtemplate: resource %s has no CodeUri", id)
		}
		*codeURI = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: uris[id]}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("samtemplate: encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("samtemplate: encode YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// mapValue returns the value node of key in the mapping node m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
