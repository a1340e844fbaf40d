package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScanMain runs the scanner on a small module in a temporary directory:
// what main reaches counts, what it does not reach does not.
func TestScanMain(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"config/config.go": `package config

const (
	EnvUsed   = "M_USED"
	EnvUnused = "M_UNUSED"
)

type Config struct{ Used, Unused string }

func (Config) Table(id string) string { return id }

func FromEnv(getenv func(string) string) Config {
	c := Config{Used: getenv(EnvUsed), Unused: getenv(EnvUnused)}
	c.Unused = c.Unused + ""
	return c
}
`,
		"lib/lib.go": `package lib

import (
	"net/http"
	"os"
)

var Endpoint = os.Getenv("M_AT_INIT")

type Handler struct{ table string }

func New(table string) *Handler { return &Handler{table: table} }

// ServeHTTP is reached implicitly: Handler is reachable.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.get() }

func (h *Handler) get()          { _ = os.Getenv("M_FROM_SERVE") }

// Other is never named by reachable code: its get is not reached by the
// selector h.get.
type Other struct{}

func (Other) get()               { _ = os.Getenv("M_OTHER_TYPE") }
func NewOther() Other             { return Other{} }
func (h *Handler) Unreached()    { _ = os.Getenv("M_UNREACHED_METHOD") }
func Unreached()                 { _, _ = os.LookupEnv("M_UNREACHED_FUNC") }

// Options has a field named like the function Table: a literal that sets the
// field does not reach the function; one keyed by a constant in a map does.
type Options struct{ Table string }

func Table() string              { return os.Getenv("M_FIELD_NAMESAKE") }

const K = "M_MAP_KEY_CONST"

func Use() (Options, map[string]int) {
	return Options{Table: "t"}, map[string]int{K: 1}
}
func Chain() *Handler             { return nil }
`,
		"cmd/app/main.go": `package main

import (
	"net/http"

	"example.com/m/config"
	"example.com/m/lib"
)

const envLocal = "M_LOCAL_CONST"

const ordersTable = "OrdersTable"

type deps struct{ cfg config.Config }

func tables(d deps, id string) []string {
	table := d.cfg.Table
	return []string{d.cfg.Table("PaymentsTable"), d.cfg.Table(ordersTable), d.cfg.Table(id), table("x")}
}

func main() { run(getenv) }

func getenv(string) string { return "" }

func run(getenv func(string) string) {
	cfg := config.FromEnv(getenv)
	_ = getenv(envLocal)
	_ = lib.Chain().ServeHTTP
	_, _ = lib.Use()
	_ = tables(deps{cfg: cfg}, "RefundsTable")
	http.ListenAndServe(":0", lib.New(cfg.Used))
}
`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := scanMain(goListDeps(t, dir, "example.com/m", "./cmd/app"), "example.com/m/cmd/app", "example.com/m/config")
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]bool{"M_LOCAL_CONST": true, "M_AT_INIT": true, "M_FROM_SERVE": true}
	if diff := cmp.Diff(wantEnv, s.Getenv); diff != "" {
		t.Errorf("Getenv mismatch (-want +got):\n%s", diff)
	}
	if !s.Selected["Used"] || s.Selected["Unused"] {
		t.Errorf("Selected = %v, want Used (read by main) and not Unused (only inside config)", s.Selected)
	}
	if !s.Qualified["net/http.ListenAndServe"] || !s.Qualified["example.com/m/lib.Chain"] {
		t.Errorf("Qualified = %v, want net/http.ListenAndServe and the module's lib.Chain", s.Qualified)
	}
	if !s.Strings["M_USED"] {
		t.Errorf("Strings lacks M_USED (a reachable constant)")
	}
	if !s.Strings["M_MAP_KEY_CONST"] {
		t.Errorf("Strings lacks M_MAP_KEY_CONST (a constant used as a map literal's key)")
	}
	if diff := cmp.Diff(map[string]bool{"PaymentsTable": true, "OrdersTable": true}, s.Tables); diff != "" {
		t.Errorf("Tables mismatch (-want +got):\n%s", diff)
	}
	if len(s.Unresolved) != 2 || !strings.Contains(s.Unresolved[0]+s.Unresolved[1], "not a constant") || !strings.Contains(s.Unresolved[0]+s.Unresolved[1], "used as a value") {
		t.Errorf("Unresolved = %q, want the call with a variable and the method value", s.Unresolved)
	}
	if got, want := len(s.Packages), 3; got != want {
		t.Errorf("len(Packages) = %d, want %d: %v", got, want, s.Packages)
	}
}
