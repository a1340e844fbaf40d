// Package jsonbody decodes request bodies strictly, for every endpoint: one
// JSON object of UTF-8, no duplicate member at any depth (encoding/json alone
// keeps the last of duplicates, so {"amount":1,"amount":100000} could mean
// one thing to a proxy or a log reader and another to the API), no \u escape
// of a lone surrogate (which the RFC 8785 canonical form of the idempotency
// fingerprint refuses), bounded nesting, and members handed one by one to the
// endpoint's own rules. Every failure is a *problem.FieldError naming the
// field (400 invalid_request), never a raw decoder message.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/oncehq/once/idempotency/problem"
)

// MaxDepth bounds the nesting of a request body.
const MaxDepth = 32

// Object checks that body is one well-formed JSON object and calls member
// for each of its members, in order, with the member's raw value. It returns
// member's first error, or a *problem.FieldError. Members named in required
// that do not appear are reported as required, in the order given.
//
// The body is tokenized once: the check hands back the top-level members,
// each raw value a slice of body (the value's bytes, without the blanks
// around it), valid while body is.
func Object(body []byte, required []string, member func(name string, raw json.RawMessage) error) error {
	members, object, err := check(body)
	if err != nil {
		return err
	}
	if !object {
		return problem.Invalid("", "the body must be a JSON object")
	}
	for _, m := range members {
		if err := member(m.name, m.raw); err != nil {
			return err
		}
	}
	for _, name := range required {
		if !slices.ContainsFunc(members, func(m rawMember) bool { return m.name == name }) {
			return problem.Invalid(name, "is required")
		}
	}
	return nil
}

// rawMember is a member of the body's top-level object.
type rawMember struct {
	name string
	raw  json.RawMessage
}

// Kind is a JSON value's type, from its first byte: '"', '{', '[', 't', 'f',
// 'n', or '0' for a number (0 for nothing).
func Kind(raw json.RawMessage) byte {
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; c {
	case '"', '{', '[', 't', 'f', 'n':
		return c
	}
	return '0'
}

// String decodes a JSON string; ok is false for any other value.
func String(raw json.RawMessage) (string, bool) {
	if Kind(raw) != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// Int decodes a JSON integer within [min, max] for field, with the rule's
// own messages.
func Int(field string, raw json.RawMessage, min, max int64) (int64, error) {
	if Kind(raw) != '0' {
		return 0, problem.Invalid(field, "must be an integer")
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	var num *strconv.NumError
	switch {
	case errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange):
		return 0, problem.Invalid(field, "must be at most %d", max)
	case err != nil:
		return 0, problem.Invalid(field, "must be an integer")
	case n < min:
		return 0, problem.Invalid(field, "must be at least %d", min)
	case n > max:
		return 0, problem.Invalid(field, "must be at most %d", max)
	}
	return n, nil
}

// check checks that body is one well-formed UTF-8 JSON value with no
// duplicate object member at any depth and no lone surrogate escape. When
// the value is an object, object is set and members are its members.
func check(body []byte) (members []rawMember, object bool, err error) {
	if !utf8.Valid(body) {
		return nil, false, problem.Invalid("", "the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	s := scan{dec: dec, body: body, members: make([]rawMember, 0, 8)}
	if err := s.value("", 0); err != nil {
		return nil, false, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false, problem.Invalid("", "the body must hold a single JSON value")
	}
	if loneSurrogate(body) {
		// encoding/json would turn it into U+FFFD; the canonical form that
		// the idempotency fingerprint needs (RFC 8785) refuses it.
		return nil, false, problem.Invalid("", "the body holds a \\u escape of a lone UTF-16 surrogate")
	}
	return s.members, s.object, nil
}

// loneSurrogate reports whether a string of body, well-formed JSON, holds a
// \u escape of a UTF-16 surrogate that is not part of a pair.
func loneSurrogate(body []byte) bool {
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && body[i+1] == 'u':
			r := hex4(body[i+2 : i+6])
			switch {
			case 0xDC00 <= r && r <= 0xDFFF:
				return true
			case 0xD800 <= r && r <= 0xDBFF:
				if i+12 > len(body) || body[i+6] != '\\' || body[i+7] != 'u' {
					return true
				}
				if lo := hex4(body[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 11
			default:
				i += 5
			}
		case c == '\\':
			i++ // skip the escaped character
		}
	}
	return false
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32) // well-formed JSON: four hex digits
	return rune(n)
}

// scan walks a body's tokens, keeping the members of its top-level object.
type scan struct {
	dec     *json.Decoder
	body    []byte
	object  bool // the body is an object
	members []rawMember
}

func (s *scan) value(path string, depth int) error {
	if depth > MaxDepth {
		return problem.Invalid(path, "is nested too deeply")
	}
	dec := s.dec
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	switch tok {
	case json.Delim('{'):
		top := depth == 0
		s.object = s.object || top
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return syntaxError(err)
			}
			key, _ := tok.(string)
			if top && key == "" {
				// No parameter has an empty name, and a problem naming
				// the field "" would read as one about the whole body.
				return problem.Invalid("", "the body has a member with an empty name")
			}
			p := key
			if path != "" {
				p = path + "." + key
			}
			if seen[key] {
				return problem.Invalid(p, "is given more than once")
			}
			seen[key] = true
			start := dec.InputOffset() // after the key: blanks, ':', blanks, then the value
			if err := s.value(p, depth+1); err != nil {
				return err
			}
			if top {
				raw := bytes.TrimLeft(s.body[start:dec.InputOffset()], " \t\r\n")
				raw = bytes.TrimLeft(raw[1:], " \t\r\n") // raw[0] is the ':'
				s.members = append(s.members, rawMember{name: key, raw: raw})
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := s.value(fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return syntaxError(err)
	}
	return nil
}

func syntaxError(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return problem.Invalid("", "the body is not valid JSON (at byte %d)", syn.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return problem.Invalid("", "the body is not valid JSON (unexpected end)")
	}
	return problem.Invalid("", "the body is not valid JSON")
}
