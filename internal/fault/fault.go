package fault

import (
	"context"
	"net/http"
	"regexp"

	"github.com/oncehq/once/idempotency"
)

// Header is the request header that names the point to crash at.
const Header = "Once-Fault"

// The points a request can crash at.
const (
	// AfterReserve is reached once the key is reserved (in Atomic mode, once
	// the record and the effects are committed: there is no reservation).
	AfterReserve = idempotency.PointAfterReserve
	// AfterProviderCall is reached once the payment provider answered
	// (issue 3).
	AfterProviderCall = "after-provider-call"
	// AfterComplete is reached once the response is stored, before it is
	// sent.
	AfterComplete = idempotency.PointAfterComplete
)

// point is the shape of every point name: "after-" and words of lower-case
// letters joined by dashes. The engine's points after a multi-step request's
// recovery points (idempotency.PointAfter: "after-order-created",
// "after-charge-created", "after-finished") and the handlers' own
// (AfterProviderCall) have it; no fixed list is kept, so that a new recovery
// point can be crashed at without changing this package.
var point = regexp.MustCompile(`^after-[a-z]+(-[a-z]+)*$`)

// ValidPoint reports whether name has the shape of a point name.
func ValidPoint(name string) bool { return len(name) <= 64 && point.MatchString(name) }

// Crash is the panic value of an injected crash.
type Crash struct {
	// Point is where the request crashed.
	Point string
}

// Error describes the crash.
func (c Crash) Error() string { return "fault: injected crash " + c.Point }

type pointKey struct{}

// Middleware makes the Once-Fault header of each request visible to Check,
// when enabled. A value that is not a point name (ValidPoint) is dropped
// here; a well-formed name that no code checks never fires.
func Middleware(enabled bool, next http.Handler) http.Handler {
	if !enabled {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.Header.Get(Header); ValidPoint(p) {
			r = r.WithContext(context.WithValue(r.Context(), pointKey{}, p))
		}
		next.ServeHTTP(w, r)
	})
}

// Check panics with Crash{point} when the request of ctx asked to crash at
// point. Its signature is that of idempotency.Config.Hook.
func Check(ctx context.Context, point string) {
	if p, ok := ctx.Value(pointKey{}).(string); ok && p == point {
		panic(Crash{Point: point})
	}
}

// AsCrash reports whether v, a recovered panic value, is an injected crash.
func AsCrash(v any) (Crash, bool) {
	c, ok := v.(Crash)
	return c, ok
}
