package deploytest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// translate writes the SAM translation of a template (argv[1]) to argv[2]
// as CloudFormation JSON, as `sam deploy` has CloudFormation do:
// aws-sam-translator's Translator, which cfn-lint itself depends on. Local
// CodeUris become S3 URIs first, as the SAM CLI's packaging makes them.
const translate = `
import json, os, sys
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
from cfnlint.decode import decode
from samtranslator.parser import parser
from samtranslator.translator.translator import Translator
tpl, errs = decode(sys.argv[1])
if errs:
    sys.exit("decode: %s" % errs)
for r in tpl["Resources"].values():
    if r.get("Type") == "AWS::Serverless::Function":
        r["Properties"]["CodeUri"] = "s3://bucket/code.zip"
out = Translator(managed_policy_map={}, sam_parser=parser.Parser()).translate(
    sam_template=json.loads(json.dumps(tpl)), parameter_values={})
json.dump(out, open(sys.argv[2], "w"), indent=1)
`

// TestCfnLint runs cfn-lint, where it is installed, on template.yaml and on
// its SAM translation. The second run matters: on a template with the
// Serverless transform cfn-lint skips some rules, W3037 (IAM actions that
// do not exist) among them (cfnlint/rules/resources/iam/Permissions.py,
// aws/serverless-application-model#3633), and the translation has no
// transform left. Informational rules (I) are not run: on the translation
// they report the partition SAM writes into the ARNs it generates.
func TestCfnLint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cfn-lint and the SAM translator")
	}
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skip("cfn-lint is not installed")
	}
	tpl := filepath.Join(root(t), "template.yaml")
	if out, err := exec.CommandContext(t.Context(), lint, "--format", "parseable", tpl).CombinedOutput(); err != nil {
		t.Errorf("cfn-lint template.yaml: %v\n%s", err, out)
	}
	translated := filepath.Join(t.TempDir(), "translated.json")
	if out, err := exec.CommandContext(t.Context(), "python3", "-c", translate, tpl, translated).CombinedOutput(); err != nil {
		t.Fatalf("SAM translation of template.yaml (aws-sam-translator, installed with cfn-lint): %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(t.Context(), lint, "--format", "parseable", translated).CombinedOutput(); err != nil {
		t.Errorf("cfn-lint on the SAM translation of template.yaml: %v\n%s", err, out)
	}
}

// TestDeployedTypesAsSAMTranslates holds samtemplate's DeployedTypes, from
// which localstackServices derives LocalStack's SERVICES, to what the SAM
// transform makes of template.yaml, where aws-sam-translator is installed
// (with cfn-lint): the same resource types.
func TestDeployedTypesAsSAMTranslates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the SAM translator")
	}
	if out, err := exec.CommandContext(t.Context(), "python3", "-c", "import cfnlint, samtranslator").CombinedOutput(); err != nil {
		t.Skipf("aws-sam-translator is not installed: %v\n%s", err, out)
	}
	translated := filepath.Join(t.TempDir(), "translated.json")
	if out, err := exec.CommandContext(t.Context(), "python3", "-c", translate, filepath.Join(root(t), "template.yaml"), translated).CombinedOutput(); err != nil {
		t.Fatalf("SAM translation of template.yaml: %v\n%s", err, out)
	}
	data, err := os.ReadFile(translated)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]struct{ Type string }
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var sam []string
	for _, r := range doc.Resources {
		sam = append(sam, r.Type)
	}
	sort.Strings(sam)
	types, err := template(t).DeployedTypes()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(slices.Compact(sam), sortedKeys(types)); diff != "" {
		t.Errorf("resource types mismatch (-SAM translation +DeployedTypes):\n%s", diff)
	}
}
