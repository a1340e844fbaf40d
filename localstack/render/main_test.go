package main

import (
	"archive/zip"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/samtemplate"
)

// TestRender renders the repository's template with a fake build and checks
// the three outputs; internal/deploytest runs the real build.
func TestRender(t *testing.T) {
	out := t.TempDir()
	var built []string
	var log bytes.Buffer
	err := render(context.Background(), options{
		repo: "../..", out: out, env: "localstack", arch: "x86_64", log: &log,
		build: func(_ context.Context, folder, dst string) error {
			built = append(built, folder)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.WriteFile(dst, []byte("binary of "+folder), 0o755)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := samtemplate.Load(filepath.Join(out, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fns := tmpl.Functions()
	if len(built) != len(fns) {
		t.Errorf("built %v, want one build per function (%d)", built, len(fns))
	}
	for id, fn := range fns {
		uri, _ := fn.Properties["CodeUri"].(string)
		key, ok := strings.CutPrefix(uri, "s3://"+Bucket+"/")
		if !ok || !strings.HasPrefix(key, id+"-") {
			t.Errorf("%s CodeUri = %q, want s3://%s/%s-<hash>.zip", id, uri, Bucket, id)
			continue
		}
		zr, err := zip.OpenReader(filepath.Join(out, key))
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if len(zr.File) != 1 || zr.File[0].Name != "bootstrap" || zr.File[0].Mode().Perm() != 0o755 {
			t.Errorf("%s zip holds %v, want one executable bootstrap", id, zr.File)
		}
		zr.Close()
	}

	// deploy.env is valid bash with the localstack environment's values.
	script := "set -eu; source " + filepath.Join(out, "deploy.env") + `; printf '%s|%s|%s|%s|%s\n' "$STACK_NAME" "$REGION" "$BUCKET" "$STAGE" "${PARAMETERS[*]}"`
	got, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, got)
	}
	want := "once|us-east-1|" + Bucket + "|prod|Architecture=x86_64 LogLevel=debug StageName=prod\n"
	if string(got) != want {
		t.Errorf("deploy.env gives %q, want %q", got, want)
	}

	// A second render with the same binaries keeps the same keys.
	before, _ := filepath.Glob(filepath.Join(out, "*.zip"))
	if err := render(context.Background(), options{repo: "../..", out: out, env: "localstack", arch: "x86_64", log: &log,
		build: func(_ context.Context, folder, dst string) error {
			os.MkdirAll(filepath.Dir(dst), 0o755)
			return os.WriteFile(dst, []byte("binary of "+folder), 0o755)
		}}); err != nil {
		t.Fatal(err)
	}
	after, _ := filepath.Glob(filepath.Join(out, "*.zip"))
	if strings.Join(before, ",") != strings.Join(after, ",") {
		t.Errorf("zips changed between identical renders: %v -> %v", before, after)
	}
}

func TestQuote(t *testing.T) {
	out, err := exec.Command("bash", "-c", "printf %s "+quote(`it's "a" $test`)).Output()
	if err != nil || string(out) != `it's "a" $test` {
		t.Errorf("bash printf %%s %s = %q, %v", quote(`it's "a" $test`), out, err)
	}
}

func TestRunFlags(t *testing.T) {
	if err := run(context.Background(), []string{"-arch", "mips"}, &bytes.Buffer{}); err == nil {
		t.Errorf("run(-arch mips) error = nil, want one")
	}
}
