package recovery

// Counter counts events for metrics; a CloudWatch EMF emitter is one. A nil
// Counter counts nothing.
type Counter interface {
	// Count adds one to each named counter.
	Count(names ...string)
}

// Metric names counted by the Sweeper and the Reconciler. Alarm on
// MetricFailed and MetricUnroutable.
const (
	MetricZombieSwept        = "zombie_swept"
	MetricReconcileScheduled = "reconcile_scheduled"
	MetricResolved           = "reconcile_resolved"
	MetricFailed             = "reconcile_failed"
	MetricUnroutable         = "reconcile_unroutable"
)

type noCounter struct{}

func (noCounter) Count(...string) {}

func counterOr(c Counter) Counter {
	if c == nil {
		return noCounter{}
	}
	return c
}
