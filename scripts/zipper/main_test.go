package main

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bin", "bootstrap")
	if err := os.MkdirAll(filepath.Dir(bootstrap), 0o755); err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("\x7fELF binary "), 1000)
	if err := os.WriteFile(bootstrap, content, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "api.zip")
	if err := write(out, []string{bootstrap}); err != nil {
		t.Fatalf("write: %v", err)
	}

	zr, err := zip.OpenReader(out)
	if err != nil {
		t.Fatalf("zip.OpenReader(%s): %v", out, err)
	}
	defer zr.Close()
	if got := len(zr.File); got != 1 {
		t.Fatalf("archive has %d entries, want 1", got)
	}
	f := zr.File[0]
	if f.Name != "bootstrap" {
		t.Errorf("entry name = %q, want %q", f.Name, "bootstrap")
	}
	if got := f.Mode().Perm(); got != 0o755 {
		t.Errorf("entry mode = %v, want %v (Lambda needs an executable bootstrap)", got, os.FileMode(0o755))
	}
	if !f.Modified.Equal(modified) {
		t.Errorf("entry modified = %v, want %v", f.Modified, modified)
	}
	rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("entry content differs from the file (%d bytes, want %d)", len(got), len(content))
	}

	// The same input gives the same archive.
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, []string{bootstrap}); err != nil {
		t.Fatalf("second write: %v", err)
	}
	second, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Errorf("two archives of the same file differ")
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a", "bootstrap")
	b := filepath.Join(dir, "b", "bootstrap")
	for _, p := range []string{a, b} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		files []string
	}{
		{"missing file", []string{filepath.Join(dir, "nope")}},
		{"directory", []string{dir}},
		{"duplicate base name", []string{a, b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.zip")
			if err := write(out, tt.files); err == nil {
				t.Errorf("write(%v) = nil, want an error", tt.files)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("write(%v) failed but left %s behind", tt.files, out)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".zipper-*"))
			if len(left) > 0 {
				t.Errorf("write(%v) failed but left temporary files %v", tt.files, left)
			}
		})
	}
}
