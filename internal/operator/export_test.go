package operator

// SetScanPages bounds t's listings' Scans to n pages.
func SetScanPages(t *Tool, n int) { t.scanPages = n }

// SetScanLimit makes each page of t's listings' Scans read at most n items.
func SetScanLimit(t *Tool, n int32) { t.scanLimit = n }

// SetHoldFor sets how long a dead-letter scan hides what it received, in
// seconds, until the test ends. Not for parallel tests.
func SetHoldFor(t interface{ Cleanup(func()) }, seconds int32) {
	old := holdFor
	holdFor = seconds
	t.Cleanup(func() { holdFor = old })
}

// NoRecordNote is what holds says of a hold whose key has no record.
const NoRecordNote = noRecordNote

// Conflicted reports whether err is a transaction cancelled only by
// writes in flight on its items.
var Conflicted = conflicted
