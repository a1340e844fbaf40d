package operator

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// maxScanPages bounds a listing's Scan: one page reads up to 1 MB.
const maxScanPages = 10000

// scanAll runs the Scan in, every page of it up to the Tool's page bound,
// and hands each item to each: a listing sorts what it read before cutting
// it to -limit, so that the items listed are the oldest of the table. When
// the bound stops the Scan first it warns, saying cut: what that leaves out
// of the listing.
func (t *Tool) scanAll(ctx context.Context, in *dynamodb.ScanInput, cut string, each func(map[string]types.AttributeValue) error) error {
	if t.scanLimit > 0 {
		in.Limit = aws.Int32(t.scanLimit)
	}
	for range t.scanPages {
		out, err := t.db.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("scan %s: %w", aws.ToString(in.TableName), err)
		}
		for _, item := range out.Items {
			if err := each(item); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	fmt.Fprintf(t.errOut, "warning: the Scan stopped after %d pages: %s\n", t.scanPages, cut)
	return nil
}

// writeListing writes rows: one JSON object per line with asJSON, else a
// table of header (tab-separated columns) and line's rendering of each row.
func writeListing[S any](t *Tool, rows []S, asJSON bool, header string, line func(S) string) error {
	if asJSON {
		for _, r := range rows {
			if err := t.writeJSON(r); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(t.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, line(r))
	}
	return w.Flush()
}
