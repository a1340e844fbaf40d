package deploytest

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"

	"github.com/oncehq/once/internal/samtemplate"
)

// root returns the repository's root directory.
func root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var (
	tmplOnce sync.Once
	tmpl     *samtemplate.Template
	tmplErr  error
)

// template returns the parsed template.yaml.
func template(t testing.TB) *samtemplate.Template {
	t.Helper()
	tmplOnce.Do(func() { tmpl, tmplErr = samtemplate.Load(filepath.Join(root(t), "template.yaml")) })
	if tmplErr != nil {
		t.Fatal(tmplErr)
	}
	return tmpl
}

// functionFolders returns the folders of functions/ (those with Go files).
func functionFolders(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root(t), "functions"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if m, _ := filepath.Glob(filepath.Join(root(t), "functions", e.Name(), "*.go")); len(m) > 0 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// hasFolder reports whether functions/<folder> holds Go code.
func hasFolder(t testing.TB, folder string) bool {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(root(t), "functions", folder, "*.go"))
	return len(m) > 0
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func list(v any) []any {
	switch x := v.(type) {
	case []any:
		return x
	case nil:
		return nil
	}
	return []any{v}
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
