package modelcheck

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// porcupineOp is one operation of a key's history, before porcupine's
// representation.
type porcupineOp struct {
	client    int
	in        opInput
	out       opOutput
	call, ret int64
}

func toPorcupine(h []porcupineOp) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(h))
	for i, o := range h {
		ops[i] = porcupine.Operation{ClientId: o.client, Input: o.in, Output: o.out, Call: o.call, Return: o.ret}
	}
	return ops
}

// linearizable checks p's history against the model. It returns the number
// of operations checked, and on failure a description (with the history
// when dump is set) and the path of porcupine's visualization.
func (c *checker) linearizable(p *partition, ops []*op, f *finalRead, dump bool) (n int, violation, file string) {
	h := c.history(p, ops, f)
	model := contractModel()
	res, info := porcupine.CheckOperationsVerbose(model, toPorcupine(h), c.cfg.checkTimeout)
	if res == porcupine.Ok {
		return len(h), "", ""
	}
	what := "not linearizable"
	if res == porcupine.Unknown {
		what = fmt.Sprintf("porcupine gave up after %v", c.cfg.checkTimeout)
	}
	var notes []porcupine.Annotation
	for _, e := range c.px.faultEvents() {
		if e.pk != p.pk {
			continue
		}
		d := e.kind.String() + " " + e.op
		if e.delay > 0 {
			d += " " + e.delay.String()
		}
		notes = append(notes, porcupine.Annotation{
			Tag: "DynamoDB proxy", Start: e.at, End: e.at + int64(e.delay),
			Description: d, BackgroundColor: "#f6d5d5",
		})
	}
	info.AddAnnotations(notes)
	var buf bytes.Buffer
	if err := porcupine.Visualize(model, info, &buf); err == nil {
		file = c.writeFile(fmt.Sprintf("key%d-%s.html", p.index, p.tenant), buf.Bytes())
	}
	if !dump {
		return len(h), fmt.Sprintf("%s: %s (%d operations)", p, what, len(h)), file
	}
	return len(h), fmt.Sprintf("%s: %s\n%s", p, what, describeHistory(p, h)), file
}

// describeHistory lists a key's variants and operations in call order, for
// the terminal.
func describeHistory(p *partition, h []porcupineOp) string {
	var b strings.Builder
	for _, v := range p.variants {
		fmt.Fprintf(&b, "      %s\n", v)
	}
	sorted := slices.Clone(h)
	slices.SortStableFunc(sorted, func(a, b porcupineOp) int { return int(a.call - b.call) })
	const most = 120
	for i, o := range sorted {
		if i == most {
			fmt.Fprintf(&b, "      ... %d more\n", len(sorted)-most)
			break
		}
		if o.in.kind == kindEnter {
			continue
		}
		fmt.Fprintf(&b, "      %8s %8s  %s\n", ms(o.call), ms(o.ret), describeOp(o.in, o.out))
	}
	return strings.TrimRight(b.String(), "\n")
}

func ms(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }
