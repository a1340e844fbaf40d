package samtemplate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRefs(t *testing.T) {
	tmpl, err := Parse([]byte(`
A: !Ref Table
B: !GetAtt Table.StreamArn
C: !Sub "${Table.Arn}/stream/*"
D: !Sub ["arn:${AWS::Partition}:sqs:${AWS::Region}:${Q}", {Q: !GetAtt Queue.QueueName}]
E: [!If [Cond, !GetAtt Url.FunctionUrl, !Ref Param]]
F: {"Fn::GetAtt": "Long.Form"}
G: !Sub "${!Literal} ${Table}"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Ref{
		"A": {{Name: "Table"}},
		"B": {{Name: "Table", Attribute: "StreamArn"}},
		"C": {{Name: "Table", Attribute: "Arn"}},
		"D": {{Name: "AWS::Partition"}, {Name: "AWS::Region"}, {Name: "Queue", Attribute: "QueueName"}},
		"E": {{Name: "Param"}, {Name: "Url", Attribute: "FunctionUrl"}},
		"F": {{Name: "Long", Attribute: "Form"}},
		"G": {{Name: "Table"}},
	}
	for key, w := range want {
		if diff := cmp.Diff(w, Refs(tmpl.Doc[key])); diff != "" {
			t.Errorf("Refs(%s) mismatch (-want +got):\n%s", key, diff)
		}
	}
	if got, want := (Ref{Name: "T", Attribute: "Arn"}).String(), "T.Arn"; got != want {
		t.Errorf("Ref.String() = %q, want %q", got, want)
	}
}
