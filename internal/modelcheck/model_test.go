package modelcheck

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// phase is where a key stands in the model (see the package documentation).
type phase uint8

const (
	phaseFree phase = iota
	phaseHeld
	phaseStored
)

// keyState is the model's state of one (tenant, key). It is comparable, as
// porcupine's default equality needs.
type keyState struct {
	phase   phase
	variant int    // holder or owner; -1 when free
	holder  int    // the request (opInput.id) that took the reservation; -1 otherwise
	answer  string // digest of the stored answer, or of the one sent unstored; "" unknown
	effects uint32 // bit v: variant v's effect exists
}

var freeKey = keyState{phase: phaseFree, variant: -1, holder: -1}

func bit(v int) uint32 { return 1 << uint(v) }

func (s keyState) has(v int) bool { return s.effects&bit(v) != 0 }

func (s keyState) withEffect(v int) keyState {
	s.effects |= bit(v)
	return s
}

// opKind tells a request from the operations the checker adds to it.
type opKind uint8

const (
	kindRequest opKind = iota // a client's request and its answer
	kindEnter                 // the reservation an External request may have taken
	kindAudit                 // the final read of the record and the effects
)

// answerClass is what an answer says about the key.
type answerClass uint8

const (
	classFinal      answerClass = iota // the request's outcome: 2xx or 4xx but 409 and 422 reused
	classInProgress                    // 409
	classReused                        // 422 idempotency_key_reused
	classFailed                        // 5xx, crashes included
)

func (c answerClass) String() string {
	return [...]string{"final", "409", "422 reused", "5xx"}[c]
}

// recordState is the final read of a key's record.
type recordState uint8

const (
	recordAbsent recordState = iota
	recordCompleted
	recordPending // IN_PROGRESS or UNKNOWN once the system is quiet
)

// opInput is a porcupine operation's input.
type opInput struct {
	kind     opKind
	id       int // the request's, shared by its reservation
	variant  int
	external bool // the variant's endpoint holds a reservation while it calls out
	resumes  bool // ...and a request of its body resumes a reservation abandoned at a recovery point
	long     bool // the request ran for a lease or longer
	label    string
}

// opOutput is a porcupine operation's output.
type opOutput struct {
	class     answerClass
	replayed  bool
	answer    string // digest of a final answer or of the stored record
	effectful bool   // a final answer that implies its variant's effect

	// The final read (kindAudit).
	record        recordState
	recordVariant int // -1: the record's variant could not be read
	effects       uint32
	duplicates    bool
	label         string
}

// step is the nondeterministic model's step: every state s can reach by
// recovery, then the operation.
func step(s keyState, in opInput, out opOutput) []keyState {
	var next []keyState
	for _, r := range settle(s) {
		next = append(next, stepFrom(r, in, out)...)
	}
	return next
}

// settle returns s and what recovery (TTL, sweeper, reconciler) can make of
// it without a client: a reservation whose variant had its effect is
// completed, one without is released.
func settle(s keyState) []keyState {
	if s.phase != phaseHeld {
		return []keyState{s}
	}
	r := keyState{phase: phaseStored, variant: s.variant, holder: -1, answer: s.answer, effects: s.effects}
	if !s.has(s.variant) {
		r = keyState{phase: phaseFree, variant: -1, holder: -1, effects: s.effects}
	}
	return []keyState{s, r}
}

func stepFrom(s keyState, in opInput, out opOutput) []keyState {
	v := in.variant
	switch in.kind {
	case kindEnter:
		switch {
		case s.phase == phaseFree:
			h := keyState{phase: phaseHeld, variant: v, holder: in.id, effects: s.effects}
			return []keyState{s, h, h.withEffect(v)}
		case in.resumes && s.phase == phaseHeld && s.variant == v && s.holder != in.id:
			// A multi-step request takes its own abandoned reservation over
			// (fenced) and resumes it: the answer it sends is the one the
			// earlier holder may have sent unstored.
			t := s
			t.holder = in.id
			return []keyState{s, t}
		}
		return []keyState{s}
	case kindAudit:
		return audit(s, out)
	}
	switch out.class {
	case classFinal:
		done := keyState{phase: phaseStored, variant: v, holder: -1, answer: out.answer, effects: s.effects}
		if out.effectful {
			done = done.withEffect(v)
		}
		switch s.phase {
		case phaseStored:
			if out.replayed && s.variant == v && (s.answer == "" || s.answer == out.answer) {
				done.effects = s.effects
				return []keyState{done}
			}
		case phaseHeld:
			if in.external && !out.replayed && s.holder == in.id && (s.answer == "" || s.answer == out.answer) {
				unstored := done
				unstored.phase, unstored.holder = phaseHeld, in.id
				return []keyState{done, unstored}
			}
		case phaseFree:
			if !out.replayed || !in.external {
				return []keyState{done}
			}
		}
		return nil
	case classInProgress:
		if s.phase == phaseHeld && s.variant == v || in.external && in.long {
			return []keyState{s}
		}
		return nil
	case classReused:
		if s.phase != phaseFree && s.variant != v {
			return []keyState{s}
		}
		return nil
	default: // classFailed
		next := []keyState{s}
		switch {
		case s.phase == phaseHeld && s.holder == in.id:
			if !s.has(v) {
				next = append(next, keyState{phase: phaseFree, variant: -1, holder: -1, effects: s.effects})
			}
			next = append(next, keyState{phase: phaseStored, variant: v, holder: -1, answer: s.answer, effects: s.effects})
		case s.phase == phaseFree && in.external:
			next = append(next,
				keyState{phase: phaseHeld, variant: v, holder: in.id, effects: s.effects},
				keyState{phase: phaseStored, variant: v, holder: -1, effects: s.effects})
		case s.phase == phaseFree:
			next = append(next, keyState{phase: phaseStored, variant: v, holder: -1, effects: s.effects | bit(v)})
		}
		return next
	}
}

// audit is the final read: legal only in a state without a reservation whose
// effects and record are the ones read.
func audit(s keyState, out opOutput) []keyState {
	if out.duplicates || s.phase == phaseHeld || s.effects != out.effects {
		return nil
	}
	switch out.record {
	case recordAbsent:
		if s.phase == phaseFree {
			return []keyState{s}
		}
	case recordCompleted:
		if s.phase == phaseStored && (out.recordVariant < 0 || s.variant == out.recordVariant) &&
			(s.answer == "" || s.answer == out.answer) {
			s.answer = out.answer
			return []keyState{s}
		}
	}
	return nil
}

// contractModel is the model as porcupine takes it, for the operations of
// one key (the checker partitions histories itself).
func contractModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{freeKey} },
		Step: func(state, input, output any) []any {
			next := step(state.(keyState), input.(opInput), output.(opOutput))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output any) string {
			return describeOp(input.(opInput), output.(opOutput))
		},
		DescribeState: func(state any) string { return describeState(state.(keyState)) },
	}
	return nm.ToModel()
}

func describeOp(in opInput, out opOutput) string {
	switch in.kind {
	case kindEnter:
		return "may reserve v" + fmt.Sprint(in.variant) + " (" + in.label + ")"
	case kindAudit:
		return "final read: " + out.label
	}
	return in.label + " → " + out.label
}

func describeState(s keyState) string {
	var b strings.Builder
	switch s.phase {
	case phaseFree:
		b.WriteString("free")
	case phaseHeld:
		fmt.Fprintf(&b, "held by v%d (request %d)", s.variant, s.holder)
		if s.answer != "" {
			fmt.Fprintf(&b, " (sent %s unstored)", s.answer)
		}
	case phaseStored:
		a := s.answer
		if a == "" {
			a = "an unseen answer"
		}
		fmt.Fprintf(&b, "v%d stored %s", s.variant, a)
	}
	return b.String() + ", effects " + describeEffects(s.effects)
}

func describeEffects(e uint32) string {
	if e == 0 {
		return "{}"
	}
	var vs []string
	for e != 0 {
		v := bits.TrailingZeros32(e)
		vs = append(vs, fmt.Sprintf("v%d", v))
		e &^= bit(v)
	}
	return "{" + strings.Join(vs, ",") + "}"
}

// TestModel holds the model to small histories whose verdicts are known:
// the contract's allowances and its violations, among them the planted
// bug's shape.
func TestModel(t *testing.T) {
	const x, y, rej = "201 #aaaaaaaa", "201 #bbbbbbbb", "422 #cccccccc"
	type req struct {
		call, ret int64
		v         int
		external  bool
		resumes   bool
		long      bool
		class     answerClass
		replayed  bool
		answer    string
		enter     bool // add the reservation an External request may take
	}
	final := func(call, ret int64, v int, external bool, answer string, replayed bool) req {
		return req{call: call, ret: ret, v: v, external: external, class: classFinal, answer: answer, replayed: replayed, enter: external && !replayed}
	}
	other := func(call, ret int64, v int, external bool, class answerClass) req {
		return req{call: call, ret: ret, v: v, external: external, class: class, enter: external && class == classFailed}
	}
	// phased is a final answer of a multi-step request (orders), which
	// resumes its own abandoned reservation.
	phased := func(call, ret int64, v int, answer string) req {
		r := final(call, ret, v, true, answer, false)
		r.resumes = true
		return r
	}
	auditOp := func(at int64, record recordState, v int, answer string, effects uint32) porcupineOp {
		return porcupineOp{
			in:   opInput{kind: kindAudit},
			out:  opOutput{record: record, recordVariant: v, answer: answer, effects: effects},
			call: at, ret: at + 1,
		}
	}
	type modelCase struct {
		name  string
		reqs  []req
		audit bool // end with the final read of audits[name]
		want  bool
	}
	tests := []modelCase{
		{"replay after the first answer", []req{final(0, 1, 0, false, x, false), final(2, 3, 0, false, x, true)}, false, true},
		{"a second first answer", []req{final(0, 1, 0, false, x, false), final(2, 3, 0, false, y, false)}, false, false},
		{"a replay that differs", []req{final(0, 1, 0, true, x, false), final(2, 3, 0, true, y, true)}, false, false},
		{"a replay without its header", []req{final(0, 1, 0, true, x, false), final(2, 3, 0, true, x, false)}, false, false},
		{"another body after a stored answer: 422", []req{final(0, 1, 0, false, x, false), other(2, 3, 1, false, classReused)}, false, true},
		{"another body executes after a stored answer", []req{final(0, 1, 0, false, x, false), final(2, 3, 1, false, y, false)}, false, false},
		{"422 on a free key", []req{other(0, 1, 1, false, classReused)}, false, false},
		{"422 while another body holds the key", []req{other(0, 10, 0, true, classFailed), other(2, 3, 1, true, classReused)}, false, true},
		{"422 after the holder released", []req{other(0, 1, 0, true, classFailed), other(2, 3, 1, true, classReused)}, false, true},
		{"409 while the same body runs", []req{final(0, 10, 0, true, x, false), other(2, 3, 0, true, classInProgress)}, false, true},
		{"409 on a free key", []req{other(0, 1, 0, true, classInProgress)}, false, false},
		{"409 to a zombie, whatever holds the key", []req{
			final(0, 1, 1, true, y, false),
			{call: 2, ret: 40, v: 0, external: true, long: true, class: classInProgress, enter: true},
		}, false, true},
		{"409 on a stored key to a short request", []req{final(0, 1, 1, true, y, false), other(2, 3, 0, true, classInProgress)}, false, false},
		{"a crash, then the reconciled answer", []req{other(0, 1, 0, true, classFailed), final(5, 6, 0, true, x, true)}, true, true},
		{"an answer sent unstored, then a 409, then its replay", []req{
			final(0, 1, 0, true, x, false), other(2, 3, 0, true, classInProgress), final(4, 5, 0, true, x, true),
		}, false, true},
		{"an answer sent unstored, then another answer", []req{
			final(0, 1, 0, true, x, false), other(2, 3, 0, true, classInProgress), final(4, 5, 0, true, y, true),
		}, false, false},
		{"Atomic: the request's own commit replayed", []req{final(0, 1, 0, false, x, true)}, true, true},
		{"External: a replay of nothing", []req{final(0, 1, 0, true, x, true)}, false, false},
		{"Atomic: a 5xx that committed, then its replay", []req{other(0, 1, 0, false, classFailed), final(2, 3, 0, false, x, true)}, true, true},
		{"the other body runs after a release", []req{other(0, 1, 0, true, classFailed), final(2, 3, 1, true, y, false)}, true, true},
		{"the other body runs after a crash that charged", []req{other(0, 1, 0, true, classFailed), final(2, 3, 1, true, y, false)}, true, false},
		{"an effect and no record", []req{other(0, 1, 0, true, classFailed)}, true, false},
		{"Atomic: 409 with nothing held", []req{final(0, 1, 0, false, x, false), other(2, 3, 0, false, classInProgress)}, false, false},
		{"multi-step: an answer sent unstored, then a retry that resumes it", []req{phased(0, 1, 0, x), phased(3, 4, 0, x)}, true, true},
		{"multi-step: the resumed answer differs", []req{phased(0, 1, 0, x), phased(3, 4, 0, y)}, false, false},
		{"multi-step: another body cannot resume it", []req{phased(0, 1, 0, x), phased(3, 4, 1, y)}, false, false},
		{"not multi-step: a fresh answer after another request's", []req{final(0, 1, 0, true, x, false), final(3, 4, 0, true, x, false)}, false, false},
	}
	audits := map[string]porcupineOp{
		"a crash, then the reconciled answer":                               auditOp(10, recordCompleted, 0, x, bit(0)),
		"Atomic: the request's own commit replayed":                         auditOp(10, recordCompleted, 0, x, bit(0)),
		"Atomic: a 5xx that committed, then its replay":                     auditOp(10, recordCompleted, 0, x, bit(0)),
		"the other body runs after a release":                               auditOp(10, recordCompleted, 1, y, bit(1)),
		"the other body runs after a crash that charged":                    auditOp(10, recordCompleted, 1, y, bit(0)|bit(1)),
		"an effect and no record":                                           auditOp(10, recordAbsent, -1, "", bit(0)),
		"multi-step: an answer sent unstored, then a retry that resumes it": auditOp(10, recordCompleted, 0, x, bit(0)),
		"the planted bug: a zombie overwrote the new body":                  auditOp(200, recordCompleted, 0, rej, bit(1)),
		"the same schedule, fenced":                                         auditOp(200, recordCompleted, 1, y, bit(1)),
	}
	// The planted bug's shape: the zombie (v0, rejected, nothing charged) is
	// held in its completion while a retry hands its expired reservation to
	// the reconciler, which releases it; v1 reserves and charges; the
	// zombie's unfenced completion then overwrites v1's reservation.
	zombie := []req{
		{call: 0, ret: 100, v: 0, external: true, long: true, class: classFinal, answer: rej, enter: true},
		other(40, 41, 0, true, classInProgress),
		other(60, 80, 1, true, classFailed),
	}
	fenced := []req{
		{call: 0, ret: 100, v: 0, external: true, long: true, class: classInProgress, enter: true},
		other(40, 41, 0, true, classInProgress),
		other(60, 80, 1, true, classFailed),
	}
	tests = append(tests,
		modelCase{"the planted bug: a zombie overwrote the new body", zombie, true, false},
		modelCase{"the same schedule, fenced", fenced, true, true},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []porcupineOp
			for i, r := range tt.reqs {
				in := opInput{kind: kindRequest, id: i, variant: r.v, external: r.external, resumes: r.resumes, long: r.long}
				out := opOutput{class: r.class, replayed: r.replayed, answer: r.answer,
					effectful: r.class == classFinal && strings.HasPrefix(r.answer, "201")}
				h = append(h, porcupineOp{client: i, in: in, out: out, call: r.call, ret: r.ret})
				if r.enter {
					in.kind = kindEnter
					h = append(h, porcupineOp{client: len(tt.reqs) + i, in: in, call: r.call, ret: r.ret})
				}
			}
			if tt.audit {
				a, ok := audits[tt.name]
				if !ok {
					t.Fatalf("no audit for %q", tt.name)
				}
				a.client = 2 * len(tt.reqs)
				h = append(h, a)
			}
			got := porcupine.CheckOperations(contractModel(), toPorcupine(h))
			if got != tt.want {
				t.Errorf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}
