package devstack_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

// readmeBlocks returns the sh code blocks of the README's "Try it" section.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(dynamotest.TemplatePath(t)), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Try it\n")
	if !ok {
		t.Fatal(`README.md has no "## Try it" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// TestReadmeExamples runs the README's curl examples, as written, against a
// devstack started as `ONCE_FAULT_INJECTION=1 make run` starts it (only the
// port differs), and checks the answers they promise, in order.
func TestReadmeExamples(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("ONCE_REQUIRE_DYNAMODB") == "1" {
				t.Fatalf("%s: %v", tool, err)
			}
			t.Skipf("%s: %v", tool, err)
		}
	}
	blocks := readmeBlocks(t)
	// Statuses each block's responses must have, in order; "r" marks a
	// response that must carry Idempotent-Replayed: true, "function_failed"
	// a crash answered with template.yaml's DEFAULT_5XX.
	want := [][]string{
		// payments: create, sf-string replay, mismatch, other tenant, no key,
		// invalid body, GET, other tenant's GET, no Authorization, unknown key.
		{"201", "201r", "422", "201", "400", "400", "200", "404", "401", "403"},
		// charges: tok_visa, tok_chargeDeclined, tok_unavailable, tok_flaky
		// and its retry after the outage, tok_timeout, its retry once
		// reconciled, the tok_slow duplicate.
		{"201", "402", "503", "503", "201", "504", "201r", "409"},
		// refunds: 2000, its replay, too much, the rest, the payment, the
		// refund, the refund as another tenant.
		{"201", "201r", "400", "201", "200", "200", "404"},
		// the crash after the provider call, and the retry within the lease.
		{"502 function_failed", "409"},
		// orders: tok_visa, its replay (the third, for the id, is silent),
		// GET, another tenant's GET, tok_chargeDeclined.
		{"201", "201r", "200", "404", "402"},
		// orders: the crash after finished and its replay; the crash after
		// charge_created and the retry within the lease.
		{"502 function_failed", "201r", "502 function_failed", "409"},
	}
	if len(blocks) != len(want) {
		t.Fatalf("README Try it has %d sh blocks, the test knows %d: update the test with the README", len(blocks), len(want))
	}

	env := testEnv(t)
	env["ONCE_FAULT_INJECTION"] = "1"
	out := &lambdatest.Buffer{}
	stack := start(t, env, out)
	status := regexp.MustCompile(`HTTP/1\.1 (\d{3}) `)
	for i, block := range blocks {
		script := strings.ReplaceAll(block, "http://127.0.0.1:3000", stack.URL())
		cmd := exec.CommandContext(t.Context(), "bash", "-e", "-c", script)
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("block %d: %v\n%s", i, err, got)
		}
		var statuses []string
		text := string(got)
		idx := status.FindAllStringSubmatchIndex(text, -1)
		for j, m := range idx {
			end := len(text)
			if j+1 < len(idx) {
				end = idx[j+1][0]
			}
			s := text[m[2]:m[3]]
			answer := text[m[0]:end]
			if strings.Contains(strings.ToLower(answer), "\nidempotent-replayed: true") {
				s += "r"
			}
			if s == "502" && strings.Contains(answer, `"code":"function_failed"`) {
				s += " function_failed"
			}
			statuses = append(statuses, s)
		}
		if diff := cmp.Diff(want[i], statuses); diff != "" {
			t.Errorf("block %d answers mismatch (-want +got):\n%s\noutput:\n%s", i, diff, got)
		}
	}
	if t.Failed() {
		t.Logf("stack output:\n%s", out.String())
	}
}
