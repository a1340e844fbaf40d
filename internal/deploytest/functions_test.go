package deploytest

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/samtemplate"
)

// TestFunctionsMatchFolders checks that the template's functions are the
// folders of functions/: each folder has its <Name>Function, each function
// its folder.
func TestFunctionsMatchFolders(t *testing.T) {
	fns := template(t).Functions()
	if len(fns) == 0 {
		t.Fatal("the template has no functions")
	}
	// Every folder has its function...
	for _, folder := range functionFolders(t) {
		id := samtemplate.FunctionLogicalID(folder)
		if _, ok := fns[id]; !ok {
			t.Errorf("functions/%s has no %s in template.yaml", folder, id)
		}
	}
	// ...and every function its folder.
	for id := range fns {
		folder := samtemplate.FunctionFolder(id)
		if folder == "" {
			t.Errorf("%s: logical ID does not follow <Name>Function", id)
			continue
		}
		if !hasFolder(t, folder) {
			t.Errorf("%s: functions/%s does not exist", id, folder)
		}
	}
}

func TestFunctionsBuildProperties(t *testing.T) {
	globals := mapOf(template(t).Section("Globals")["Function"])
	want := map[string]any{
		"Runtime":       "provided.al2023",
		"Handler":       "bootstrap",
		"Architectures": []any{map[string]any{"Ref": "Architecture"}},
		"Tracing":       "Active",
	}
	for k, v := range want {
		if diff := cmp.Diff(v, globals[k]); diff != "" {
			t.Errorf("Globals.Function.%s mismatch (-want +got):\n%s", k, diff)
		}
	}
	logging := mapOf(globals["LoggingConfig"])
	if logging["LogFormat"] != "JSON" || logging["ApplicationLogLevel"] == nil || logging["SystemLogLevel"] == nil {
		t.Errorf("Globals.Function.LoggingConfig = %v, want LogFormat JSON with ApplicationLogLevel and SystemLogLevel", logging)
	}
	for id, fn := range template(t).Functions() {
		if got, want := fn.BuildTarget(), "build-"+id; got != want {
			t.Errorf("%s build target = %q, want %q (Metadata: {BuildMethod: makefile})", id, got, want)
		}
		if got := fn.Properties["CodeUri"]; got != "." {
			t.Errorf("%s CodeUri = %v, want . (the Makefile builds from the repository root)", id, got)
		}
		for k, v := range want {
			if diff := cmp.Diff(v, fn.Properties[k]); diff != "" {
				t.Errorf("%s %s mismatch (-want +got; set it only in Globals):\n%s", id, k, diff)
			}
		}
	}
}

// lambdaBuild is how a function is built for Lambda (the Makefile's
// build-<LogicalId> targets must agree).
var lambdaBuild = []string{"build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w"}

// TestFunctionsBuild builds every function for both architectures as a
// static, stripped Linux executable.
func TestFunctionsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function twice")
	}
	folders := functionFolders(t)
	if len(folders) == 0 {
		t.Fatal("functions/ has no function folders")
	}
	for _, arch := range []struct {
		goarch  string
		machine elf.Machine
	}{{"arm64", elf.EM_AARCH64}, {"amd64", elf.EM_X86_64}} {
		t.Run(arch.goarch, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			args := append(append([]string{}, lambdaBuild...), "-o", out+string(filepath.Separator))
			for _, f := range folders {
				args = append(args, "./functions/"+f)
			}
			cmd := exec.Command("go", args...)
			cmd.Dir = root(t)
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch.goarch, "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %v: %v\n%s", args, err, b)
			}
			for _, f := range folders {
				checkBootstrap(t, filepath.Join(out, f), arch.machine)
			}
		})
	}
}

// checkBootstrap checks that path is a static, stripped Linux executable for
// machine, as provided.al2023 runs it.
func checkBootstrap(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if f.Machine != machine || f.Type != elf.ET_EXEC || f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s: machine %v, type %v, OS ABI %v; want %v ET_EXEC for Linux", path, f.Machine, f.Type, f.OSABI, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (%v); build with CGO_ENABLED=0", path, p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s is not stripped (has .symtab); link with -ldflags='-s -w'", path)
	}
}

// TestMakefileBuildTargets runs the Makefile's build-<LogicalId> targets the
// way SAM's makefile builder does and checks the bootstrap they write.
func TestMakefileBuildTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function")
	}
	for _, id := range sortedKeys(template(t).Functions()) {
		folder := samtemplate.FunctionFolder(id)
		if !hasFolder(t, folder) {
			continue
		}
		target := template(t).Functions()[id].BuildTarget()
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			cmd := exec.Command("make", "--no-print-directory", target, "ARTIFACTS_DIR="+out)
			cmd.Dir = root(t)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("make %s: %v\n%s", target, err, stderr.String())
			}
			// The template's default Architecture is arm64.
			checkBootstrap(t, filepath.Join(out, "bootstrap"), elf.EM_AARCH64)
		})
	}
}
