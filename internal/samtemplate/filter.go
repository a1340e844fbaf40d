package samtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// Lambda event filtering
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html),
// the rules an event source mapping's FilterCriteria applies to each record
// before invoking the function, so that tests can hold a pattern to the
// records its function must see and the ones it must not:
//
//   - A pattern is a JSON object. Every key must match (AND); "$or" holds a
//     list of patterns of which at least one must match.
//   - An object value descends into the event's object of that name; an
//     array value lists the accepted values of a leaf (OR).
//   - A leaf value is an exact value (string, number, true, false, null) or
//     an operator object: prefix, suffix, equals-ignore-case, wildcard,
//     anything-but (a value, a list, or prefix / suffix / equals-ignore-case
//     / wildcard), numeric (=, <, <=, >, >= with up to two conditions),
//     exists (true / false) and cidr.
//   - A field absent from the event matches only {"exists": false}; when the
//     event's value is an array, the field matches if any element does.
//   - Strings never match numbers: the DynamoDB record {"N": "5"} holds a
//     string.

// Pattern is a compiled event filtering pattern.
type Pattern struct {
	root *patternNode
}

type patternNode struct {
	fields []patternField
	or     []*patternNode
}

type patternField struct {
	key    string
	nested *patternNode // the pattern's value is an object
	leaf   []matcher    // the pattern's value is an array
}

// matcher matches one present, non-array event value.
type matcher interface {
	match(v any) bool
}

// MatchPattern reports whether event, a JSON object such as a DynamoDB
// stream record in Lambda's JSON form, matches the filtering pattern. It
// returns an error when the pattern is not a valid pattern or the event is
// not a JSON object.
func MatchPattern(pattern, event []byte) (bool, error) {
	p, err := CompilePattern(pattern)
	if err != nil {
		return false, err
	}
	return p.Match(event)
}

// MatchFilters reports whether event matches any of patterns, as Lambda
// combines the Filters of one FilterCriteria. With no patterns every event
// matches, as a mapping without FilterCriteria delivers every record.
func MatchFilters(patterns []string, event []byte) (bool, error) {
	if len(patterns) == 0 {
		return true, nil
	}
	for _, s := range patterns {
		ok, err := MatchPattern([]byte(s), event)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// CompilePattern parses and validates a filtering pattern.
func CompilePattern(pattern []byte) (*Pattern, error) {
	v, err := decodeJSON(pattern)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: pattern: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("samtemplate: pattern: not a JSON object")
	}
	root, err := compileNode(m, "")
	if err != nil {
		return nil, fmt.Errorf("samtemplate: pattern: %w", err)
	}
	return &Pattern{root: root}, nil
}

// Match reports whether event, a JSON object, matches p.
func (p *Pattern) Match(event []byte) (bool, error) {
	m, err := decodeEvent(event)
	if err != nil {
		return false, err
	}
	return p.root.match(m), nil
}

// MatchAny reports whether event, a JSON object, matches any of patterns, as
// Lambda combines the Filters of one FilterCriteria; it decodes event once
// for all of them. With no patterns every event matches.
func MatchAny(patterns []*Pattern, event []byte) (bool, error) {
	if len(patterns) == 0 {
		return true, nil
	}
	m, err := decodeEvent(event)
	if err != nil {
		return false, err
	}
	for _, p := range patterns {
		if p.root.match(m) {
			return true, nil
		}
	}
	return false, nil
}

// MatchAnyDocument is MatchAny for a decoded event: doc is a JSON object as
// DecodeDocument decodes it (objects as map[string]any, arrays as []any,
// numbers as json.Number). Only the fields the patterns name are read (see
// Fields), so doc may leave out the others.
func MatchAnyDocument(patterns []*Pattern, doc map[string]any) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p.root.match(doc) {
			return true
		}
	}
	return false
}

// Fields is the set of an event's fields that patterns read, as a tree of
// keys: a key whose value is nil is read whole (a list of accepted values
// tests it), one with a non-nil value only in the fields named there (the
// pattern descends into it). A document holding only these fields of an
// event matches exactly as the whole event does.
type Fields map[string]Fields

// FieldsOf is the union of the fields that patterns read.
func FieldsOf(patterns []*Pattern) Fields {
	f := Fields{}
	for _, p := range patterns {
		p.root.addFields(f)
	}
	return f
}

func (n *patternNode) addFields(f Fields) {
	for _, pf := range n.fields {
		sub, seen := f[pf.key]
		switch {
		case seen && sub == nil: // read whole already
		case pf.nested == nil:
			f[pf.key] = nil
		default:
			if sub == nil {
				sub = Fields{}
				f[pf.key] = sub
			}
			pf.nested.addFields(sub)
		}
	}
	for _, alt := range n.or {
		alt.addFields(f)
	}
}

// DecodeDocument decodes data, JSON, as MatchAnyDocument expects documents
// (numbers as json.Number).
func DecodeDocument(data []byte) (any, error) {
	return decodeJSON(data)
}

// decodeEvent decodes event, which must be a JSON object.
func decodeEvent(event []byte) (map[string]any, error) {
	v, err := decodeJSON(event)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: event: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("samtemplate: event: not a JSON object")
	}
	return m, nil
}

func decodeJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func compileNode(m map[string]any, path string) (*patternNode, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("%s: empty object", where(path))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	n := &patternNode{}
	for _, k := range keys {
		p := join(path, k)
		if k == "$or" {
			alts, ok := m[k].([]any)
			if !ok || len(alts) < 2 {
				return nil, fmt.Errorf("%s: $or takes a list of at least two patterns", where(p))
			}
			for i, a := range alts {
				am, ok := a.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s[%d]: not an object", where(p), i)
				}
				alt, err := compileNode(am, path)
				if err != nil {
					return nil, err
				}
				n.or = append(n.or, alt)
			}
			continue
		}
		switch v := m[k].(type) {
		case map[string]any:
			child, err := compileNode(v, p)
			if err != nil {
				return nil, err
			}
			n.fields = append(n.fields, patternField{key: k, nested: child})
		case []any:
			if len(v) == 0 {
				return nil, fmt.Errorf("%s: empty list of values", where(p))
			}
			f := patternField{key: k}
			for _, e := range v {
				mt, err := compileMatcher(e)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", where(p), err)
				}
				f.leaf = append(f.leaf, mt)
			}
			n.fields = append(n.fields, f)
		default:
			return nil, fmt.Errorf("%s: value must be an object or a list, got %s", where(p), jsonText(v))
		}
	}
	return n, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func where(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func compileMatcher(e any) (matcher, error) {
	switch v := e.(type) {
	case nil, string, bool:
		return exactMatcher{v}, nil
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("bad number %s", v)
		}
		return exactMatcher{f}, nil
	case []any:
		return nil, fmt.Errorf("nested list %s", jsonText(v))
	case map[string]any:
		if len(v) != 1 {
			return nil, fmt.Errorf("operator object %s must have exactly one key", jsonText(v))
		}
		for op, arg := range v {
			return compileOperator(op, arg)
		}
	}
	return nil, fmt.Errorf("unsupported value %s", jsonText(e))
}

func compileOperator(op string, arg any) (matcher, error) {
	switch op {
	case "prefix", "suffix":
		s, fold, err := stringArg(op, arg)
		if err != nil {
			return nil, err
		}
		return affixMatcher{suffix: op == "suffix", s: s, fold: fold}, nil
	case "equals-ignore-case":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("equals-ignore-case takes a string, got %s", jsonText(arg))
		}
		return foldMatcher(s), nil
	case "wildcard":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("wildcard takes a string, got %s", jsonText(arg))
		}
		if strings.Contains(s, "**") {
			return nil, fmt.Errorf("wildcard %q has consecutive wildcards", s)
		}
		return wildcardMatcher(s), nil
	case "exists":
		b, ok := arg.(bool)
		if !ok {
			return nil, fmt.Errorf("exists takes true or false, got %s", jsonText(arg))
		}
		return existsMatcher(b), nil
	case "numeric":
		return compileNumeric(arg)
	case "anything-but":
		return compileAnythingBut(arg)
	case "cidr":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("cidr takes a string, got %s", jsonText(arg))
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("cidr: %w", err)
		}
		return cidrMatcher(p.Masked()), nil
	}
	return nil, fmt.Errorf("unknown operator %q", op)
}

// stringArg reads the argument of prefix and suffix: a string, or
// {"equals-ignore-case": string}.
func stringArg(op string, arg any) (s string, fold bool, err error) {
	switch a := arg.(type) {
	case string:
		return a, false, nil
	case map[string]any:
		if s, ok := a["equals-ignore-case"].(string); ok && len(a) == 1 {
			return s, true, nil
		}
	}
	return "", false, fmt.Errorf("%s takes a string or {\"equals-ignore-case\": string}, got %s", op, jsonText(arg))
}

func compileNumeric(arg any) (matcher, error) {
	l, ok := arg.([]any)
	if !ok || len(l) == 0 || len(l)%2 != 0 || len(l) > 4 {
		return nil, fmt.Errorf("numeric takes one or two operator-number pairs, got %s", jsonText(arg))
	}
	var m numericMatcher
	for i := 0; i < len(l); i += 2 {
		op, ok := l[i].(string)
		if !ok {
			return nil, fmt.Errorf("numeric: operator %s is not a string", jsonText(l[i]))
		}
		switch op {
		case "=", "<", "<=", ">", ">=":
		default:
			return nil, fmt.Errorf("numeric: unknown operator %q", op)
		}
		n, ok := l[i+1].(json.Number)
		if !ok {
			return nil, fmt.Errorf("numeric: %s is not a number", jsonText(l[i+1]))
		}
		f, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("numeric: bad number %s", n)
		}
		m = append(m, numericCond{op: op, n: f})
	}
	return m, nil
}

func compileAnythingBut(arg any) (matcher, error) {
	switch a := arg.(type) {
	case string, json.Number:
		m, err := compileMatcher(a)
		if err != nil {
			return nil, err
		}
		return anythingBut{m}, nil
	case []any:
		if len(a) == 0 {
			return nil, errors.New("anything-but: empty list")
		}
		var ms anythingBut
		for _, e := range a {
			switch e.(type) {
			case string, json.Number:
			default:
				return nil, fmt.Errorf("anything-but: list takes strings or numbers, got %s", jsonText(e))
			}
			m, err := compileMatcher(e)
			if err != nil {
				return nil, err
			}
			ms = append(ms, m)
		}
		return ms, nil
	case map[string]any:
		if len(a) != 1 {
			return nil, fmt.Errorf("anything-but: %s must have exactly one key", jsonText(a))
		}
		for op, inner := range a {
			switch op {
			case "prefix", "suffix", "equals-ignore-case", "wildcard":
			default:
				return nil, fmt.Errorf("anything-but: unsupported operator %q", op)
			}
			// These operators take a string or a list of strings here.
			var args []any
			if l, ok := inner.([]any); ok && op != "prefix" && op != "suffix" {
				args = l
			} else {
				args = []any{inner}
			}
			var ms anythingBut
			for _, x := range args {
				m, err := compileOperator(op, x)
				if err != nil {
					return nil, fmt.Errorf("anything-but: %w", err)
				}
				ms = append(ms, m)
			}
			return stringsOnly{ms}, nil
		}
	}
	return nil, fmt.Errorf("anything-but: unsupported argument %s", jsonText(arg))
}

func (n *patternNode) match(obj map[string]any) bool {
	for _, f := range n.fields {
		v, present := obj[f.key]
		if f.nested != nil {
			if !f.nested.matchValue(v, present) {
				return false
			}
			continue
		}
		if !matchLeaf(f.leaf, v, present) {
			return false
		}
	}
	if len(n.or) == 0 {
		return true
	}
	for _, alt := range n.or {
		if alt.match(obj) {
			return true
		}
	}
	return false
}

// matchValue matches a nested pattern against the event's value of its field.
func (n *patternNode) matchValue(v any, present bool) bool {
	if !present {
		return n.match(nil)
	}
	switch x := v.(type) {
	case map[string]any:
		return n.match(x)
	case []any:
		for _, e := range x {
			if m, ok := e.(map[string]any); ok && n.match(m) {
				return true
			}
		}
		return false
	}
	return n.match(nil)
}

func matchLeaf(ms []matcher, v any, present bool) bool {
	for _, m := range ms {
		if e, ok := m.(existsMatcher); ok {
			if bool(e) == present {
				return true
			}
			continue
		}
		if !present {
			continue
		}
		if l, ok := v.([]any); ok {
			for _, x := range l {
				if m.match(x) {
					return true
				}
			}
			continue
		}
		if m.match(v) {
			return true
		}
	}
	return false
}

// exactMatcher matches a string, a number (as float64), a bool or null.
type exactMatcher struct{ v any }

func (m exactMatcher) match(v any) bool {
	switch want := m.v.(type) {
	case nil:
		return v == nil
	case string:
		s, ok := v.(string)
		return ok && s == want
	case bool:
		b, ok := v.(bool)
		return ok && b == want
	case float64:
		f, ok := number(v)
		return ok && f == want
	}
	return false
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return f, err == nil
}

type affixMatcher struct {
	suffix bool
	s      string
	fold   bool
}

func (m affixMatcher) match(v any) bool {
	s, ok := v.(string)
	if !ok || len(s) < len(m.s) {
		return false
	}
	part := s[:len(m.s)]
	if m.suffix {
		part = s[len(s)-len(m.s):]
	}
	if m.fold {
		return strings.EqualFold(part, m.s)
	}
	return part == m.s
}

type foldMatcher string

func (m foldMatcher) match(v any) bool {
	s, ok := v.(string)
	return ok && strings.EqualFold(s, string(m))
}

// wildcardMatcher matches strings against a pattern in which * stands for
// any run of characters; \* is a literal star and \\ a literal backslash.
type wildcardMatcher string

func (m wildcardMatcher) match(v any) bool {
	s, ok := v.(string)
	return ok && globMatch(string(m), s)
}

func globMatch(pattern, s string) bool {
	// Split the pattern into literal segments separated by unescaped stars.
	var segs []string
	var cur strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '\\' && i+1 < len(pattern) && (pattern[i+1] == '*' || pattern[i+1] == '\\'):
			cur.WriteByte(pattern[i+1])
			i++
		case c == '*':
			segs = append(segs, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	segs = append(segs, cur.String())
	if len(segs) == 1 {
		return s == segs[0]
	}
	first, last := segs[0], segs[len(segs)-1]
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	for _, mid := range segs[1 : len(segs)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}

// existsMatcher is handled by matchLeaf, which alone knows whether the field
// is present.
type existsMatcher bool

func (existsMatcher) match(any) bool { return false }

type numericCond struct {
	op string
	n  float64
}

type numericMatcher []numericCond

func (m numericMatcher) match(v any) bool {
	f, ok := number(v)
	if !ok {
		return false
	}
	for _, c := range m {
		var ok bool
		switch c.op {
		case "=":
			ok = f == c.n
		case "<":
			ok = f < c.n
		case "<=":
			ok = f <= c.n
		case ">":
			ok = f > c.n
		case ">=":
			ok = f >= c.n
		}
		if !ok {
			return false
		}
	}
	return true
}

// anythingBut matches a value that none of its matchers match.
type anythingBut []matcher

func (m anythingBut) match(v any) bool {
	for _, x := range m {
		if x.match(v) {
			return false
		}
	}
	return true
}

// stringsOnly restricts a matcher to string values (anything-but with
// prefix, suffix, equals-ignore-case or wildcard).
type stringsOnly struct{ m matcher }

func (m stringsOnly) match(v any) bool {
	_, ok := v.(string)
	return ok && m.m.match(v)
}

type cidrMatcher netip.Prefix

func (m cidrMatcher) match(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	a, err := netip.ParseAddr(s)
	return err == nil && netip.Prefix(m).Contains(a)
}
