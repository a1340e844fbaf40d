package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCount(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "once", map[string]string{"Service": "api"})
	e.now = func() time.Time { return time.UnixMilli(1700000000123) }
	e.Count("reserve_created")

	want := `{"_aws":{"Timestamp":1700000000123,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"reserve_created","Unit":"Count"}]}]},"Service":"api","reserve_created":1}` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("Count() wrote\n%s\nwant\n%s", got, want)
	}
}

func TestCountSeveral(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "ns", map[string]string{"Service": "api", "Stage": "dev"})
	e.Count("a", "b")
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("Count() wrote invalid JSON %q: %v", buf.String(), err)
	}
	aws := doc["_aws"].(map[string]any)
	cwm := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if diff := cmp.Diff([]any{[]any{"Service", "Stage"}}, cwm["Dimensions"]); diff != "" {
		t.Errorf("Dimensions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{
		map[string]any{"Name": "a", "Unit": "Count"},
		map[string]any{"Name": "b", "Unit": "Count"},
	}, cwm["Metrics"]); diff != "" {
		t.Errorf("Metrics (-want +got):\n%s", diff)
	}
	for k, want := range map[string]any{"Service": "api", "Stage": "dev", "a": 1.0, "b": 1.0} {
		if doc[k] != want {
			t.Errorf("doc[%q] = %v, want %v", k, doc[k], want)
		}
	}
	if ts := int64(aws["Timestamp"].(float64)); time.Since(time.UnixMilli(ts)).Abs() > time.Minute {
		t.Errorf("Timestamp = %d, want about now", ts)
	}
}

func TestNilAndEmpty(t *testing.T) {
	var e *Emitter
	e.Count("x") // must not panic
	var buf bytes.Buffer
	New(&buf, "ns", nil).Count()
	if buf.Len() != 0 {
		t.Errorf("Count() with no names wrote %q, want nothing", buf.String())
	}
	New(&buf, "ns", nil).Count("x")
	if !strings.Contains(buf.String(), `"Dimensions":[[]]`) {
		t.Errorf("Count() without dimensions wrote %q, want an empty dimension set", buf.String())
	}
}

func TestConcurrent(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "once", map[string]string{"Service": "api"})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				e.Count("reserve_replayed")
			}
		})
	}
	wg.Wait()
	n := 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatalf("line %d is not JSON: %v", n+1, err)
		}
		n++
	}
	if n != 1000 {
		t.Errorf("%d lines, want 1000", n)
	}
}

// TestCountAgain: a name counted again gets the same document but for its
// timestamp, whatever was counted in between.
func TestCountAgain(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "once", map[string]string{"Service": "api"})
	ts := int64(1700000000123)
	e.now = func() time.Time { ts++; return time.UnixMilli(ts) }
	e.Count("reserve_created")
	e.Count("a", "b")
	e.Count("reserve_replayed")
	e.Count("reserve_created")

	doc := func(ts, name string) string {
		return `{"_aws":{"Timestamp":` + ts + `,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"` + name + `","Unit":"Count"}]}]},"Service":"api","` + name + `":1}`
	}
	want := []string{
		doc("1700000000124", "reserve_created"),
		`{"_aws":{"Timestamp":1700000000125,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"a","Unit":"Count"},{"Name":"b","Unit":"Count"}]}]},"Service":"api","a":1,"b":1}`,
		doc("1700000000126", "reserve_replayed"),
		doc("1700000000127", "reserve_created"),
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")); diff != "" {
		t.Errorf("Count() wrote (-want +got):\n%s", diff)
	}
}

// BenchmarkCount measures the api function's counter of each request.
func BenchmarkCount(b *testing.B) {
	e := New(io.Discard, "once", map[string]string{"Service": "api"})
	b.ReportAllocs()
	for b.Loop() {
		e.Count("reserve_created")
	}
}

// TestPut: a figure is written with its value, 0 included, and a count
// written after it still counts 1.
func TestPut(t *testing.T) {
	for _, v := range []int64{0, 1, 42} {
		var buf bytes.Buffer
		e := New(&buf, "once", map[string]string{"Service": "auditor"})
		e.now = func() time.Time { return time.UnixMilli(1700000000123) }
		e.PutAt("abandoned_records", v, e.now())
		e.Count("abandoned_records")
		want := fmt.Sprintf(`{"_aws":{"Timestamp":1700000000123,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"abandoned_records","Unit":"Count"}]}]},"Service":"auditor","abandoned_records":%d}`+"\n", v) +
			`{"_aws":{"Timestamp":1700000000123,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"abandoned_records","Unit":"Count"}]}]},"Service":"auditor","abandoned_records":1}` + "\n"
		if got := buf.String(); got != want {
			t.Errorf("PutAt(%d), Count() wrote\n%s\nwant\n%s", v, got, want)
		}
	}
	var e *Emitter
	e.PutAt("x", 1, time.Now()) // must not panic
}

// TestPutAt: the document carries the time it is given, not the clock's.
func TestPutAt(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "once", map[string]string{"Service": "auditor"})
	e.now = func() time.Time { return time.UnixMilli(1700000999000) }
	e.PutAt("abandoned_records", 3, time.UnixMilli(1700000000123))
	want := `{"_aws":{"Timestamp":1700000000123,"CloudWatchMetrics":[{"Namespace":"once","Dimensions":[["Service"]],"Metrics":[{"Name":"abandoned_records","Unit":"Count"}]}]},"Service":"auditor","abandoned_records":3}` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("PutAt wrote\n%s\nwant\n%s", got, want)
	}
}
