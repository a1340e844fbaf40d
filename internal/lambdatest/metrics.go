package lambdatest

import (
	"bufio"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// namespace is the functions' CloudWatch namespace (app.MetricsNamespace).
const namespace = "once"

// emf is one EMF document: its directives and every member, the dimension
// and metric values among them.
type emf struct {
	directives []directive
	values     map[string]any
}

type directive struct {
	Namespace  string
	Dimensions [][]string
	Metrics    []struct{ Name, Unit string }
}

var errNotEMF = errors.New("not an EMF document")

func parseEMF(line []byte) (emf, error) {
	var doc struct {
		AWS *struct{ CloudWatchMetrics []directive } `json:"_aws"`
	}
	var values map[string]any
	if err := json.Unmarshal(line, &values); err != nil {
		return emf{}, err
	}
	if err := json.Unmarshal(line, &doc); err != nil {
		return emf{}, err
	}
	if doc.AWS == nil {
		return emf{}, errNotEMF
	}
	return emf{directives: doc.AWS.CloudWatchMetrics, values: values}, nil
}

// Counts sums by name the counts in output, a handler's metric output: one
// EMF document a line and nothing else. It fails t on a line that is not an
// EMF document with one directive, and reports an error for a document that
// is not in the namespace once with the one dimension Service=service, and
// for a metric that is not a count.
func Counts(t testing.TB, output, service string) map[string]int {
	t.Helper()
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		doc, err := parseEMF(line)
		if err != nil || len(doc.directives) != 1 {
			t.Fatalf("metrics line %q: %v, want one EMF directive", line, err)
		}
		d := doc.directives[0]
		if d.Namespace != namespace || !slices.EqualFunc(d.Dimensions, [][]string{{"Service"}}, slices.Equal) || doc.values["Service"] != service {
			t.Errorf("metrics line %q: namespace %q, dimensions %v, Service %v; want %s, [[Service]], %s",
				line, d.Namespace, d.Dimensions, doc.values["Service"], namespace, service)
		}
		for _, m := range d.Metrics {
			n, ok := doc.values[m.Name].(float64)
			if !ok || m.Unit != "Count" {
				t.Errorf("metrics line %q: metric %s = %v with unit %q, want a count", line, m.Name, doc.values[m.Name], m.Unit)
			}
			got[m.Name] += int(n)
		}
	}
	return got
}

// CountsAmong sums by name the counts of every EMF document among the lines
// of output, whatever their namespace and dimensions, passing over the lines
// that are not EMF documents: the log lines of a process that writes both to
// one stream.
func CountsAmong(output string) map[string]int {
	got := map[string]int{}
	for line := range strings.Lines(output) {
		doc, err := parseEMF([]byte(line))
		if err != nil {
			continue
		}
		for _, d := range doc.directives {
			for _, m := range d.Metrics {
				if n, ok := doc.values[m.Name].(float64); ok {
					got[m.Name] += int(n)
				}
			}
		}
	}
	return got
}
