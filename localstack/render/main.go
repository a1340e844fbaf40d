// Command render prepares what LocalStack's ready hook deploys
// (init/ready.d/10-deploy-once.sh): it builds every function of
// template.yaml for Lambda on the given architecture and writes, in one
// directory,
//
//   - <LogicalId>-<hash>.zip: the function's bootstrap;
//   - template.yaml: the repository's template with each CodeUri pointing at
//     its zip in LocalStack's S3 (what `sam package` would write);
//   - deploy.env: the stack name, region, bucket and template parameters of
//     samconfig.toml's localstack environment, for the hook to source.
//
// localstack/deploy.sh runs it on the host, so neither the SAM CLI nor Go is
// needed inside the container:
//
//	go run ./localstack/render -arch x86_64 -out localstack/.artifacts
package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/oncehq/once/internal/samtemplate"
)

// Bucket is the LocalStack S3 bucket the hook uploads the zips to.
const Bucket = "once-localstack-artifacts"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	arch := fs.String("arch", defaultArch(), "Lambda architecture: arm64 or x86_64 (LocalStack runs the host's)")
	out := fs.String("out", "localstack/.artifacts", "output directory")
	repo := fs.String("repo", ".", "repository root (template.yaml, samconfig.toml, functions/)")
	env := fs.String("config-env", "localstack", "samconfig.toml environment")
	if err := fs.Parse(args); err != nil {
		return err
	}
	goarch, ok := map[string]string{"arm64": "arm64", "x86_64": "amd64"}[*arch]
	if !ok {
		return fmt.Errorf("-arch %q: want arm64 or x86_64", *arch)
	}
	build := func(ctx context.Context, folder, dst string) error {
		return goBuild(ctx, *repo, folder, goarch, dst)
	}
	return render(ctx, options{repo: *repo, out: *out, env: *env, arch: *arch, build: build, log: stdout})
}

func defaultArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return "x86_64"
}

type options struct {
	repo, out, env, arch string
	// build writes the bootstrap of functions/<folder> to dst.
	build func(ctx context.Context, folder, dst string) error
	log   io.Writer
}

func render(ctx context.Context, o options) error {
	data, err := os.ReadFile(filepath.Join(o.repo, "template.yaml"))
	if err != nil {
		return err
	}
	tmpl, err := samtemplate.Parse(data)
	if err != nil {
		return err
	}
	cfg, err := samtemplate.LoadSAMConfig(filepath.Join(o.repo, "samconfig.toml"))
	if err != nil {
		return err
	}
	deploy := cfg.Parameters(o.env, "deploy")
	stack, _ := deploy["stack_name"].(string)
	region, _ := deploy["region"].(string)
	if stack == "" || region == "" {
		return fmt.Errorf("samconfig.toml: [%s.deploy.parameters] or [%s.global.parameters] must set stack_name and region", o.env, o.env)
	}
	params, err := cfg.ParameterOverrides(o.env, "deploy")
	if err != nil {
		return err
	}
	params["Architecture"] = o.arch

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "once-render-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	fns := tmpl.Functions()
	ids := make([]string, 0, len(fns))
	for id := range fns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	uris := map[string]string{}
	keep := map[string]bool{}
	for _, id := range ids {
		folder := samtemplate.FunctionFolder(id)
		if folder == "" {
			return fmt.Errorf("%s: logical ID does not name a functions/ folder", id)
		}
		bin := filepath.Join(tmp, id, "bootstrap")
		if err := o.build(ctx, folder, bin); err != nil {
			return fmt.Errorf("build %s: %w", id, err)
		}
		z, err := zipBootstrap(bin)
		if err != nil {
			return fmt.Errorf("zip %s: %w", id, err)
		}
		sum := sha256.Sum256(z)
		key := id + "-" + hex.EncodeToString(sum[:6]) + ".zip"
		if err := os.WriteFile(filepath.Join(o.out, key), z, 0o644); err != nil {
			return err
		}
		uris[id] = "s3://" + Bucket + "/" + key
		keep[key] = true
		fmt.Fprintf(o.log, "%s: functions/%s -> %s\n", id, folder, key)
	}
	// Drop the zips of earlier builds.
	old, _ := filepath.Glob(filepath.Join(o.out, "*.zip"))
	for _, f := range old {
		if !keep[filepath.Base(f)] {
			os.Remove(f)
		}
	}
	packaged, err := samtemplate.SetCodeURIs(data, uris)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "template.yaml"), packaged, 0o644); err != nil {
		return err
	}
	stage := params["StageName"]
	if stage == "" {
		stage = tmpl.ParameterDefaults()["StageName"]
	}
	if err := os.WriteFile(filepath.Join(o.out, "deploy.env"), deployEnv(stack, region, stage, params), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(o.log, "stack %s (%s), parameters %v: written to %s\n", stack, region, params, o.out)
	return nil
}

// deployEnv is a bash file that the ready hook sources.
func deployEnv(stack, region, stage string, params map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by localstack/render; sourced by init/ready.d/10-deploy-once.sh.\n")
	fmt.Fprintf(&b, "STACK_NAME=%s\nREGION=%s\nBUCKET=%s\nSTAGE=%s\n", quote(stack), quote(region), quote(Bucket), quote(stage))
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("PARAMETERS=(")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(k + "=" + params[k]))
	}
	b.WriteString(")\n")
	return b.Bytes()
}

// quote quotes s for bash.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// goBuild builds functions/<folder> as SAM's makefile builder does.
func goBuild(ctx context.Context, repo, folder, goarch, dst string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w", "-o", dst, "./functions/"+folder)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return nil
}

// zipBootstrap returns a Lambda deployment package holding bin as an
// executable "bootstrap". It is reproducible: the same binary gives the same
// bytes, so an unchanged function keeps its S3 key and is not updated.
func zipBootstrap(bin string) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, errors.New("empty bootstrap")
	}
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
