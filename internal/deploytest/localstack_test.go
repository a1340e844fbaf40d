package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/oncehq/once/internal/samtemplate"
)

// localstackPort is LocalStack's edge port, as the Makefile and README use it.
const localstackPort = "4566"

// localstackDeployServices are the services the ready hook's deploy itself
// uses, whatever the template holds: CloudFormation, S3 for the artifacts
// bucket (and the template cloudformation deploy uploads), STS for the
// AWS CLI's identity.
var localstackDeployServices = []string{"cloudformation", "s3", "sts"}

// localstackServiceOf maps the service part of a CloudFormation resource
// type (AWS::<Service>::...) to the LocalStack service that provides it.
var localstackServiceOf = map[string]string{
	"ApiGateway": "apigateway", "CloudFormation": "cloudformation", "CloudWatch": "cloudwatch",
	"DynamoDB": "dynamodb", "Events": "events", "IAM": "iam", "Kinesis": "kinesis", "KMS": "kms",
	"Lambda": "lambda", "Logs": "logs", "S3": "s3", "Scheduler": "scheduler", "SNS": "sns",
	"SQS": "sqs", "StepFunctions": "stepfunctions",
}

// localstackServices derives the LocalStack services a deploy of tpl needs
// (STRICT_SERVICE_LOADING loads only those SERVICES lists): the deploy's
// own, and the service of every resource type the stack is made of once
// the SAM transform has expanded it (samtemplate's DeployedTypes: a
// Schedule event's AWS::Events::Rule, an SQS or DynamoDB event's event
// source mapping, ...); a table with a stream needs dynamodbstreams, and
// Kinesis, which backs LocalStack's DynamoDB streams; one with
// SSESpecification KMS, for its managed key.
func localstackServices(tpl *samtemplate.Template) ([]string, error) {
	types, err := tpl.DeployedTypes()
	if err != nil {
		return nil, err
	}
	services := slices.Clone(localstackDeployServices)
	for typ := range types {
		parts := strings.Split(typ, "::")
		svc, ok := localstackServiceOf[parts[min(1, len(parts)-1)]]
		if len(parts) != 3 || parts[0] != "AWS" || !ok {
			return nil, fmt.Errorf("resource type %s (of %v): no LocalStack service known for it", typ, types[typ])
		}
		services = append(services, svc)
	}
	for _, table := range tpl.ResourcesOfType("AWS::DynamoDB::Table") {
		if table.Properties["StreamSpecification"] != nil {
			services = append(services, "dynamodbstreams", "kinesis")
		}
		if table.Properties["SSESpecification"] != nil {
			services = append(services, "kms")
		}
	}
	sort.Strings(services)
	return slices.Compact(services), nil
}

// The scripts the Makefile's localstack-* targets run, and the ready hook.
var localstackScripts = []string{"up.sh", "deploy.sh", "down.sh", "init/ready.d/10-deploy-once.sh"}

type compose struct {
	Name     string
	Services map[string]struct {
		Image       string
		Ports       []string
		Environment any
		Volumes     []string
		Healthcheck map[string]any
	}
}

func TestLocalStackCompose(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "localstack", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	ls, ok := c.Services["localstack"]
	if !ok || len(c.Services) != 1 {
		t.Fatalf("services = %v, want one, localstack", sortedKeys(c.Services))
	}
	if got, want := ls.Image, "${LOCALSTACK_IMAGE:-localstack/localstack:4.14.0}"; got != want {
		t.Errorf("image = %q, want %q", got, want)
	}
	image := regexp.MustCompile(`:-([^}]+)}$`).FindStringSubmatch(ls.Image)
	if image == nil || !regexp.MustCompile(`^localstack/localstack:\d+\.\d+\.\d+$`).MatchString(image[1]) {
		t.Errorf("image default %v is not pinned to a version tag", image)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:" + localstackPort + ":" + localstackPort}, ls.Ports); diff != "" {
		t.Errorf("ports mismatch (-want +got): bind to loopback only\n%s", diff)
	}
	env := map[string]string{}
	switch e := ls.Environment.(type) {
	case map[string]any:
		for k, v := range e {
			env[k] = fmt.Sprint(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			env[k] = v
		}
	}
	if env["DYNAMODB_REMOVE_EXPIRED_ITEMS"] != "1" {
		t.Errorf("DYNAMODB_REMOVE_EXPIRED_ITEMS = %q, want 1", env["DYNAMODB_REMOVE_EXPIRED_ITEMS"])
	}
	if got, want := env["LOCALSTACK_AUTH_TOKEN"], "${LOCALSTACK_AUTH_TOKEN:-}"; got != want {
		t.Errorf("LOCALSTACK_AUTH_TOKEN = %q, want %q (passed through)", got, want)
	}
	services := strings.Split(env["SERVICES"], ",")
	sort.Strings(services)
	want, err := localstackServices(template(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, services); diff != "" {
		t.Errorf("SERVICES mismatch (-derived from template.yaml +got):\n%s", diff)
	}
	mounts := map[string]string{}
	for _, v := range ls.Volumes {
		parts := strings.Split(v, ":")
		mounts[parts[1]] = parts[0]
	}
	if mounts["/var/run/docker.sock"] != "/var/run/docker.sock" {
		t.Errorf("volumes %v: want the Docker socket mounted for Lambda", ls.Volumes)
	}
	if mounts["/etc/localstack/init/ready.d"] != "./init/ready.d" || mounts["/opt/once"] != "./.artifacts" {
		t.Errorf("volumes %v: want ./init/ready.d on /etc/localstack/init/ready.d and ./.artifacts on /opt/once", ls.Volumes)
	}
	if ls.Healthcheck == nil {
		t.Errorf("no healthcheck: up.sh waits for it")
	}
	if _, err := exec.LookPath("docker"); err == nil {
		cmd := exec.Command("docker", "compose", "-f", "localstack/docker-compose.yml", "config", "--quiet")
		cmd.Dir = root(t)
		if out, err := cmd.CombinedOutput(); err != nil && !bytes.Contains(out, []byte("unknown")) {
			t.Errorf("docker compose config: %v\n%s", err, out)
		}
	}
}

func TestLocalStackScripts(t *testing.T) {
	for _, name := range localstackScripts {
		path := filepath.Join(root(t), "localstack", name)
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode()&0o111 != 0o111 {
			t.Errorf("%s mode %v: want executable (LocalStack runs ready hooks only if they are)", name, fi.Mode())
		}
		if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", name, err, out)
		}
		if sc, err := exec.LookPath("shellcheck"); err == nil {
			if out, err := exec.Command(sc, path).CombinedOutput(); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", name, err, out)
			}
		}
	}
	// The hook reads the names render writes, and the ports agree.
	hook, err := os.ReadFile(filepath.Join(root(t), "localstack", "init", "ready.d", "10-deploy-once.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"STACK_NAME", "REGION", "BUCKET", "STAGE", "PARAMETERS", "/opt/once", "CAPABILITY_IAM"} {
		if !bytes.Contains(hook, []byte(v)) {
			t.Errorf("the ready hook does not use %s", v)
		}
	}
	for _, name := range append(localstackScripts, "README.md", "docker-compose.yml", "../Makefile", "../README.md") {
		data, err := os.ReadFile(filepath.Join(root(t), "localstack", name))
		if err != nil {
			continue
		}
		for _, m := range regexp.MustCompile(`(?:localhost|127\.0\.0\.1|localstack\.cloud):(\d+)`).FindAllSubmatch(data, -1) {
			if string(m[1]) != localstackPort && regexp.MustCompile(`(?i)localstack`).Match(data) && string(m[1])[:2] == "45" {
				t.Errorf("%s uses port %s, want LocalStack's %s", name, m[1], localstackPort)
			}
		}
	}
}

// TestMakefileLocalStackTargets checks that make localstack-up, -deploy and
// -down run the scripts.
func TestMakefileLocalStackTargets(t *testing.T) {
	for target, script := range map[string]string{"localstack-up": "localstack/up.sh", "localstack-deploy": "localstack/deploy.sh", "localstack-down": "localstack/down.sh"} {
		cmd := exec.Command("make", "--no-print-directory", "-n", target)
		cmd.Dir = root(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("make -n %s: %v\n%s", target, err, out)
			continue
		}
		if !bytes.Contains(out, []byte(script)) {
			t.Errorf("make %s runs %q, want it to run %s", target, out, script)
		}
	}
}

// samconfigStackName returns the stack name of samconfig.toml's default
// environment.
func samconfigStackName(t *testing.T) string {
	t.Helper()
	c := samconfig(t)
	name, _ := c.Parameters("default", "deploy")["stack_name"].(string)
	if name == "" {
		t.Fatal("samconfig.toml sets no stack_name")
	}
	return name
}

func samconfig(t *testing.T) *samtemplate.SAMConfig {
	t.Helper()
	c, err := samtemplate.LoadSAMConfig(filepath.Join(root(t), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSAMConfig(t *testing.T) {
	c := samconfig(t)
	if c.Version != 0.1 {
		t.Errorf("version = %v, want 0.1", c.Version)
	}
	if got := samconfigStackName(t); got != "once" {
		t.Errorf("default stack_name = %q, want once", got)
	}
	build := c.Parameters("default", "build")
	if build["parallel"] != true {
		t.Errorf("[default.build.parameters] = %v, want parallel", build)
	}
	// No build is cached: SAM CLI's cached build (CachedBuildStrategy in
	// samcli/lib/build/build_strategy.py) hashes each function's whole
	// CodeUri, ignoring only .aws-sam (dir_checksum's ignore_list, which
	// no setting extends), and a makefile function is a build definition
	// of its own (FunctionBuildDefinition.__eq__ in build_graph.py): with
	// every CodeUri the repository, each build would read .cache/ and .git
	// once per function, to save builds that Go's build cache makes quick.
	for _, env := range sortedKeys(c.Envs) {
		if v, ok := c.Parameters(env, "build")["cached"]; ok && v != false {
			t.Errorf("[%s.build.parameters] cached = %v, want it unset (or false)", env, v)
		}
	}
	// Every build runs the Makefile in the repository (SAM CLI's
	// --build-in-source, which its makefile workflow supports): without
	// it, SAM copies the whole CodeUri, .cache/ included, per function.
	for _, env := range sortedKeys(c.Envs) {
		for _, cmd := range []string{"build", "sync"} {
			if _, ok := c.Envs[env][cmd]; ok && c.Parameters(env, cmd)["build_in_source"] != true {
				t.Errorf("[%s.%s.parameters] build_in_source = %v, want true", env, cmd, c.Parameters(env, cmd)["build_in_source"])
			}
		}
	}
	for id, fn := range template(t).Functions() {
		if fn.BuildTarget() == "" {
			t.Errorf("%s is not built by the Makefile (Metadata: {BuildMethod: makefile}): build_in_source would not apply to it", id)
		}
	}
	deploy := c.Parameters("default", "deploy")
	for k, v := range map[string]any{"capabilities": "CAPABILITY_IAM", "confirm_changeset": true, "resolve_s3": true} {
		if deploy[k] != v {
			t.Errorf("[default.deploy.parameters] %s = %v, want %v", k, deploy[k], v)
		}
	}
	ls := c.Parameters("localstack", "deploy")
	for k, v := range map[string]any{"stack_name": "once", "region": "us-east-1", "capabilities": "CAPABILITY_IAM", "confirm_changeset": false} {
		if ls[k] != v {
			t.Errorf("localstack deploy %s = %v, want %v", k, ls[k], v)
		}
	}
	// Every override names a parameter and passes its constraints.
	params := template(t).Section("Parameters")
	for _, env := range sortedKeys(c.Envs) {
		overrides, err := c.ParameterOverrides(env, "deploy")
		if err != nil {
			t.Error(err)
			continue
		}
		for k, v := range overrides {
			p := mapOf(params[k])
			if p == nil {
				t.Errorf("%s parameter_overrides: %s is not a template parameter", env, k)
				continue
			}
			if allowed := list(p["AllowedValues"]); allowed != nil {
				ok := false
				for _, a := range allowed {
					ok = ok || fmt.Sprint(a) == v
				}
				if !ok {
					t.Errorf("%s parameter_overrides: %s=%s is not in %v", env, k, v, allowed)
				}
			}
			if pat, ok := p["AllowedPattern"].(string); ok && !regexp.MustCompile(pat).MatchString(v) {
				t.Errorf("%s parameter_overrides: %s=%s does not match %s", env, k, v, pat)
			}
		}
	}
}

// TestLocalStackRender runs localstack/render for real (building every
// function).
func TestLocalStackRender(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function")
	}
	for id := range template(t).Functions() {
		if !hasFolder(t, samtemplate.FunctionFolder(id)) {
			t.Fatalf("functions/%s does not exist", samtemplate.FunctionFolder(id))
		}
	}
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./localstack/render", "-arch", "x86_64", "-out", out)
	cmd.Dir = root(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./localstack/render: %v\n%s", err, b)
	}
	zips, _ := filepath.Glob(filepath.Join(out, "*.zip"))
	if got, want := len(zips), len(template(t).Functions()); got != want {
		t.Errorf("render wrote %d zips, want %d", got, want)
	}
	if _, err := samtemplate.Load(filepath.Join(out, "template.yaml")); err != nil {
		t.Error(err)
	}
}
