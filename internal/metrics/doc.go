// Package metrics writes counters (Count), and figures (PutAt), in CloudWatch Embedded Metric Format (EMF):
// one JSON document per line on a writer. In Lambda the writer is stdout and
// CloudWatch Logs turns the lines into metrics, with no API call on the
// request path.
//
// A document looks like this (one line):
//
//	{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"once",
//	"Dimensions":[["Service"]],"Metrics":[{"Name":"reserve_created","Unit":"Count"}]}]},
//	"Service":"api","reserve_created":1}
package metrics
