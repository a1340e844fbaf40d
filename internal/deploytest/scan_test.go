package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A code scan finds what the code reachable from one main package uses,
// without type checking:
//
//   - the packages are the module's packages among `go list -deps` of the
//     main package, for linux with -tags lambda.norpc, as deployed;
//   - a declaration is reachable from main, from an init function or from a
//     package-level variable through identifiers of its package and
//     qualified identifiers (pkg.Name) of other module packages;
//   - a selector x.Name on anything but a package reaches every method called
//     Name of a reachable type in those packages (an over-approximation that
//     needs no type checking: a value of a type whose name no reachable code
//     mentions cannot exist), and a reachable type reaches its methods that
//     are called implicitly (ServeHTTP, Error, String, ...);
//   - the scan records the string literals passed to getenv-like calls, the
//     names selected (x.Name) outside internal/config, qualified references
//     to other packages (types.Put), every string literal, and the
//     constants passed to x.Table(id) (config.Config.Table: the tables a
//     function names, whose variables it reads).

// scan is what the code reachable from one main package uses.
type scan struct {
	// Packages are the module's packages the main package depends on,
	// itself included.
	Packages []string
	// Getenv holds the names passed as constants to getenv-like calls
	// (os.Getenv, os.LookupEnv, a getenv func parameter) outside
	// internal/config.
	Getenv map[string]bool
	// Selected holds every Name of a selector x.Name on a value, outside
	// internal/config.
	Selected map[string]bool
	// Qualified holds every "import/path.Name" referenced.
	Qualified map[string]bool
	// Strings holds every string literal.
	Strings map[string]bool
	// Tables holds the table logical IDs passed as constants to a method
	// Table (config.Config.Table) outside internal/config.
	Tables map[string]bool
	// Unresolved lists, by position, the calls of a method Table whose
	// argument is not a constant, and the uses of cfg.Table (or x.cfg.Table)
	// as a method value: the scan cannot tell which table they name.
	Unresolved []string
}

// implicitMethods are called by the standard library or the Lambda runtime
// through interfaces, never by name in the module's code.
var implicitMethods = map[string]bool{
	"ServeHTTP": true, "Error": true, "String": true, "Unwrap": true, "Is": true, "As": true,
	"MarshalJSON": true, "UnmarshalJSON": true, "MarshalText": true, "UnmarshalText": true,
	"Read": true, "Write": true, "Close": true, "Format": true, "Invoke": true,
	"Handle": true, "Enabled": true, "WithAttrs": true, "WithGroup": true, "LogValue": true,
}

var getenvName = regexp.MustCompile(`^(?i:getenv|lookupenv)$`)

type goPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
}

type pkgCode struct {
	path    string
	files   []*ast.File
	imports map[*ast.File]map[string]string // local name -> import path
	decls   map[string][]declRef            // top-level name -> declarations
	methods map[string][]declRef            // method name -> methods
	byType  map[string][]declRef            // receiver type -> methods
}

type declRef struct {
	pkg  *pkgCode
	file *ast.File
	node ast.Node
}

var (
	modOnce sync.Once
	modPath string
	modErr  error
)

// modulePath returns the module path from go.mod.
func modulePath(t testing.TB) string {
	t.Helper()
	modOnce.Do(func() {
		f, err := os.Open(filepath.Join(root(t), "go.mod"))
		if err != nil {
			modErr = err
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
				modPath = strings.Trim(strings.TrimSpace(p), `"`)
				return
			}
		}
		modErr = errors.New("go.mod has no module line")
	})
	if modErr != nil {
		t.Fatal(modErr)
	}
	return modPath
}

// goListDeps returns the module's packages that pattern depends on, as
// deployed: GOOS=linux, -tags lambda.norpc.
func goListDeps(t testing.TB, dir, module, pattern string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc", "-json=ImportPath,Dir,GoFiles", pattern)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.ImportPath == module || strings.HasPrefix(p.ImportPath, module+"/") {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

var (
	scanMu    sync.Mutex
	scanCache = map[string]*scan{}
)

// scanFunction scans the code reachable from functions/<folder>.
func scanFunction(t testing.TB, folder string) *scan {
	t.Helper()
	scanMu.Lock()
	defer scanMu.Unlock()
	if s, ok := scanCache[folder]; ok {
		return s
	}
	module := modulePath(t)
	s, err := scanMain(goListDeps(t, root(t), module, "./functions/"+folder), module+"/functions/"+folder, module+"/internal/config")
	if err != nil {
		t.Fatal(err)
	}
	scanCache[folder] = s
	return s
}

// scanMain scans the code of pkgs reachable from the main package mainPath.
// Selectors and getenv calls inside the package quiet (internal/config,
// which reads every variable; what a function uses is the fields it selects)
// are not recorded.
func scanMain(pkgs []goPackage, mainPath, quiet string) (*scan, error) {
	fset := token.NewFileSet()
	code := map[string]*pkgCode{}
	for _, p := range pkgs {
		pc := &pkgCode{
			path:    p.ImportPath,
			imports: map[*ast.File]map[string]string{},
			decls:   map[string][]declRef{},
			methods: map[string][]declRef{},
			byType:  map[string][]declRef{},
		}
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			pc.files = append(pc.files, f)
			pc.imports[f] = fileImports(f)
			indexDecls(pc, f)
		}
		code[p.ImportPath] = pc
	}
	main, ok := code[mainPath]
	if !ok {
		return nil, fmt.Errorf("package %s not found", mainPath)
	}

	s := &scan{Getenv: map[string]bool{}, Selected: map[string]bool{}, Qualified: map[string]bool{}, Strings: map[string]bool{}, Tables: map[string]bool{}}
	// tableCalls holds the selectors x.Table called with an argument, so
	// that a use of cfg.Table that is not a call stands out.
	tableCalls := map[*ast.SelectorExpr]bool{}
	for _, p := range pkgs {
		s.Packages = append(s.Packages, p.ImportPath)
	}
	seen := map[ast.Node]bool{}
	var (
		queue []declRef
		// reachedTypes holds "import/path.Type" for the reachable types;
		// called holds the names of the methods selected on values.
		reachedTypes = map[string]bool{}
		called       = map[string]bool{}
	)
	push := func(refs ...declRef) {
		for _, r := range refs {
			if !seen[r.node] {
				seen[r.node] = true
				queue = append(queue, r)
			}
		}
	}
	push(main.decls["main"]...)
	for _, pc := range code {
		push(pc.decls["init"]...)
		for _, refs := range pc.decls {
			for _, r := range refs {
				if vs, ok := r.node.(*ast.ValueSpec); ok && isVar(r.file, vs) {
					push(r)
				}
			}
		}
	}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		if ts, ok := r.node.(*ast.TypeSpec); ok {
			reachedTypes[r.pkg.path+"."+ts.Name.Name] = true
			for _, m := range r.pkg.byType[ts.Name.Name] {
				if name := m.node.(*ast.FuncDecl).Name.Name; implicitMethods[name] || called[name] {
					push(m)
				}
			}
		}
		imports := r.pkg.imports[r.file]
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok {
					if path, ok := imports[id.Name]; ok {
						s.Qualified[path+"."+x.Sel.Name] = true
						if pc, ok := code[path]; ok {
							push(pc.decls[x.Sel.Name]...)
						}
						return false
					}
				}
				if r.pkg.path != quiet {
					s.Selected[x.Sel.Name] = true
					if x.Sel.Name == "Table" && !tableCalls[x] && lastName(x.X) == "cfg" {
						s.Unresolved = append(s.Unresolved, fset.Position(x.Pos()).String()+": cfg.Table used as a value")
					}
				}
				called[x.Sel.Name] = true
				for _, pc := range code {
					for _, m := range pc.methods[x.Sel.Name] {
						if reachedTypes[pc.path+"."+recvType(m.node.(*ast.FuncDecl).Recv.List[0].Type)] {
							push(m)
						}
					}
				}
				ast.Inspect(x.X, visit)
				return false
			case *ast.Field:
				// Field and parameter names are not references either.
				if x.Type != nil {
					ast.Inspect(x.Type, visit)
				}
				return false
			case *ast.CompositeLit:
				if _, isMap := x.Type.(*ast.MapType); x.Type == nil || isMap {
					return true
				}
				// A struct literal's keys are field names, not references
				// to declarations that share their names.
				ast.Inspect(x.Type, visit)
				for _, e := range x.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if _, isName := kv.Key.(*ast.Ident); isName {
							ast.Inspect(kv.Value, visit)
							continue
						}
					}
					ast.Inspect(e, visit)
				}
				return false
			case *ast.Ident:
				push(r.pkg.decls[x.Name]...)
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					if v, err := strconv.Unquote(x.Value); err == nil {
						s.Strings[v] = true
					}
				}
			case *ast.CallExpr:
				if name := callName(x.Fun); getenvName.MatchString(name) && len(x.Args) > 0 && r.pkg.path != quiet {
					if v, ok := constString(x.Args[0], r, code); ok {
						s.Getenv[v] = true
					}
				}
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Table" && len(x.Args) == 1 && r.pkg.path != quiet && !isImport(sel.X, imports) {
					tableCalls[sel] = true
					if v, ok := constString(x.Args[0], r, code); ok {
						s.Tables[v] = true
					} else {
						s.Unresolved = append(s.Unresolved, fset.Position(x.Pos()).String()+": Table called with a value that is not a constant")
					}
				}
			}
			return true
		}
		ast.Inspect(r.node, visit)
	}
	return s, nil
}

func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		if name != "_" && name != "." {
			m[name] = path
		}
	}
	return m
}

func indexDecls(pc *pkgCode, f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			ref := declRef{pkg: pc, file: f, node: d}
			if d.Recv == nil {
				pc.decls[d.Name.Name] = append(pc.decls[d.Name.Name], ref)
				continue
			}
			pc.methods[d.Name.Name] = append(pc.methods[d.Name.Name], ref)
			if typ := recvType(d.Recv.List[0].Type); typ != "" {
				pc.byType[typ] = append(pc.byType[typ], ref)
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				ref := declRef{pkg: pc, file: f, node: sp}
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						pc.decls[n.Name] = append(pc.decls[n.Name], ref)
					}
				case *ast.TypeSpec:
					pc.decls[sp.Name.Name] = append(pc.decls[sp.Name.Name], ref)
				}
			}
		}
	}
}

func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// isVar reports whether vs is declared by a var (not a const) declaration.
func isVar(f *ast.File, vs *ast.ValueSpec) bool {
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, sp := range g.Specs {
				if sp == vs {
					return true
				}
			}
		}
	}
	return false
}

// isImport reports whether e names an imported package (pkg in pkg.Name).
func isImport(e ast.Expr, imports map[string]string) bool {
	id, ok := e.(*ast.Ident)
	if !ok {
		return false
	}
	_, ok = imports[id.Name]
	return ok
}

// lastName returns the last name of x or a.b.x, "" for other expressions.
func lastName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

func callName(fun ast.Expr) string {
	switch x := fun.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// constString evaluates e when it is a string literal or a constant of the
// scanned packages (Name or pkg.Name) initialised by one.
func constString(e ast.Expr, r declRef, code map[string]*pkgCode) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			v, err := strconv.Unquote(x.Value)
			return v, err == nil
		}
	case *ast.Ident:
		return lookupConst(r.pkg, x.Name)
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if pc, ok := code[r.pkg.imports[r.file][id.Name]]; ok {
				return lookupConst(pc, x.Sel.Name)
			}
		}
	}
	return "", false
}

func lookupConst(pc *pkgCode, name string) (string, bool) {
	for _, d := range pc.decls[name] {
		vs, ok := d.node.(*ast.ValueSpec)
		if !ok {
			continue
		}
		for i, n := range vs.Names {
			if n.Name != name || i >= len(vs.Values) {
				continue
			}
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, err := strconv.Unquote(lit.Value)
				return v, err == nil
			}
		}
	}
	return "", false
}

// stringConsts returns the string constants of the package in dir whose
// names match re, by name.
func stringConsts(t testing.TB, dir string, re *regexp.Regexp) map[string]string {
	t.Helper()
	out := map[string]string{}
	eachConst(t, dir, func(_ *ast.File, name string, value ast.Expr) {
		if lit, ok := value.(*ast.BasicLit); ok && lit.Kind == token.STRING && re.MatchString(name) {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				out[name] = v
			}
		}
	})
	return out
}

// constValue returns the string constant name of the package in dir
// (relative to the repository's root): a literal, or a constant of another
// package of the module (KeyAttr = outbox.KeyAttr), followed there.
func constValue(t testing.TB, dir, name string) (string, bool) {
	t.Helper()
	var out string
	var found bool
	eachConst(t, filepath.Join(root(t), dir), func(f *ast.File, n string, value ast.Expr) {
		if n != name {
			return
		}
		switch v := value.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(v.Value)
			out, found = s, v.Kind == token.STRING && err == nil
		case *ast.SelectorExpr:
			pkg, _ := v.X.(*ast.Ident)
			if pkg == nil {
				return
			}
			path, ok := fileImports(f)[pkg.Name]
			if rel, inModule := strings.CutPrefix(path, modulePath(t)+"/"); ok && inModule {
				out, found = constValue(t, rel, v.Sel.Name)
			}
		}
	})
	return out, found
}

// eachConst calls fn with every constant declared with a value in the
// package in dir (its non-test files), and the file declaring it.
func eachConst(t testing.TB, dir string, fn func(f *ast.File, name string, value ast.Expr)) {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						fn(f, n.Name, vs.Values[i])
					}
				}
			}
		}
	}
}

// structFields returns the field names of the struct type name declared in
// the package in dir.
func structFields(t testing.TB, dir, name string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, sp := range g.Specs {
				ts := sp.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if ts.Name.Name != name || !ok {
					continue
				}
				var out []string
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						out = append(out, n.Name)
					}
				}
				return out
			}
		}
	}
	return nil
}
