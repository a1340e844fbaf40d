// Command zipper writes a zip archive of the files named on its command line,
// each stored under its base name with its Unix mode kept, for Lambda
// deployment packages (the bootstrap must stay executable). The Makefile uses
// it when the zip program is not installed. Entries carry a fixed timestamp,
// so the same files always give the same archive.
//
// Usage:
//
//	go run ./scripts/zipper OUT.zip FILE...
package main

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// modified is the timestamp of every entry: the zip format's earliest.
var modified = time.Date(1980, time.January, 1, 0, 0, 0, 0, time.UTC)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: zipper OUT.zip FILE...")
		os.Exit(2)
	}
	if err := write(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "zipper:", err)
		os.Exit(1)
	}
}

// write creates out atomically: a partial archive never takes its place.
func write(out string, files []string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".zipper-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	zw := zip.NewWriter(tmp)
	seen := map[string]bool{}
	for _, name := range files {
		base := filepath.Base(name)
		if seen[base] {
			tmp.Close()
			return fmt.Errorf("two files named %s", base)
		}
		seen[base] = true
		if err := add(zw, name, base); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := errors.Join(zw.Close(), tmp.Close()); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

func add(zw *zip.Writer, name, base string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", name)
	}
	h, err := zip.FileInfoHeader(info)
	if err != nil {
		return err
	}
	h.Name = base
	h.Method = zip.Deflate
	h.Modified = modified
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
