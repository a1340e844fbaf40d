package samtemplate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSAMConfig(t *testing.T) {
	c, err := ParseSAMConfig([]byte(`
version = 0.1
[default.global.parameters]
stack_name = "once"
[default.deploy.parameters]
confirm_changeset = true
parameter_overrides = "A=1 B=\"two words\" C="
[other.global.parameters]
stack_name = "other"
[other.deploy.parameters]
stack_name = "other-deploy"
parameter_overrides = ["X=1", "Y=a=b"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 0.1 {
		t.Errorf("Version = %v, want 0.1", c.Version)
	}
	p := c.Parameters("default", "deploy")
	if p["stack_name"] != "once" || p["confirm_changeset"] != true {
		t.Errorf("Parameters(default, deploy) = %v, want stack_name from global and confirm_changeset", p)
	}
	if got := c.Parameters("other", "deploy")["stack_name"]; got != "other-deploy" {
		t.Errorf("other deploy stack_name = %v, want the command's own value", got)
	}
	got, err := c.ParameterOverrides("default", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"A": "1", "B": "two words", "C": ""}, got); diff != "" {
		t.Errorf("ParameterOverrides(default) mismatch (-want +got):\n%s", diff)
	}
	got, err = c.ParameterOverrides("other", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"X": "1", "Y": "a=b"}, got); diff != "" {
		t.Errorf("ParameterOverrides(other) mismatch (-want +got):\n%s", diff)
	}
	if got, err := c.ParameterOverrides("default", "build"); err != nil || len(got) != 0 {
		t.Errorf("ParameterOverrides(default, build) = %v, %v, want empty", got, err)
	}
}

func TestParseSAMConfigErrors(t *testing.T) {
	for doc, want := range map[string]string{
		`[default.deploy.parameters]`:                                       "version is missing",
		"version = \"0.1\"":                                                 "want a number",
		"version = 0.1\n[default.deploy]\nx = 1":                            "exactly one table",
		"version = 0.1\n[default.deploy.parameters\n":                       "parse TOML",
		"version = 0.1\n[d.deploy.parameters]\nparameter_overrides = \"A\"": "",
	} {
		c, err := ParseSAMConfig([]byte(doc))
		if want == "" {
			if err != nil {
				t.Errorf("ParseSAMConfig(%q) error: %v", doc, err)
				continue
			}
			if _, err := c.ParameterOverrides("d", "deploy"); err == nil || !strings.Contains(err.Error(), "Key=Value") {
				t.Errorf("ParameterOverrides of %q error = %v, want Key=Value", doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSAMConfig(%q) error = %v, want one containing %q", doc, err, want)
		}
	}
}
