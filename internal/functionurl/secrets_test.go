package functionurl_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// secretFields are the fields whose values are secrets, or match secrets
// sent by the caller: the credentials' session token and secret, and the
// signatures.
var secretFields = map[string]bool{"SessionToken": true, "SecretAccessKey": true, "signature": true}

// TestSecretsComparedInConstantTime checks that iam.go compares a secret
// with what the request sent only in constant time
// (crypto/subtle.ConstantTimeCompare): an == or != on one is allowed only
// against the empty string (is there one at all).
func TestSecretsComparedInConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "iam.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	secret := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		return ok && secretFields[s.Sel.Name]
	}
	empty := func(e ast.Expr) bool {
		l, ok := e.(*ast.BasicLit)
		return ok && l.Value == `""`
	}
	ast.Inspect(f, func(n ast.Node) bool {
		b, ok := n.(*ast.BinaryExpr)
		if !ok || b.Op != token.EQL && b.Op != token.NEQ {
			return true
		}
		if (secret(b.X) || secret(b.Y)) && !empty(b.X) && !empty(b.Y) {
			t.Errorf("%s: a secret compared with %s: use subtle.ConstantTimeCompare", fset.Position(b.Pos()), b.Op)
		}
		return true
	})
}
