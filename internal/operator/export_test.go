package operator

// SetScanPages bounds t's listings' Scans to n pages.
func SetScanPages(t *Tool, n int) { t.scanPages = n }
