package idempotency

import (
	"strings"
	"testing"
	"time"
)

// TestCacheCountsWhatItKeeps: the cache's bound on bytes holds only if
// every byte an entry keeps is counted in its size. A multi-step record
// carries its phases' Data (up to an item's 400 KB) and an External one its
// canonical Request; replays need neither.
func TestCacheCountsWhatItKeeps(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	rec := Record{
		Key: NewKey("acme", "k"), Status: StatusCompleted, Route: "POST /v1/orders", Fingerprint: "f",
		External: true, ExpiresAt: time.Now().Add(time.Hour), Request: []byte(big), Point: "finished",
		Data:     map[string]string{"a": big, "b": big},
		Response: &Response{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)},
	}
	c, m := NewCache(10, 1<<20), &Middleware{}
	c.put(m, rec)
	e := c.byID[cacheKey{m, rec.Key.ID()}].Value.(*cacheEntry)
	kept := len(e.rec.Request) + len(e.rec.Response.Body) + len(e.rec.Fingerprint) + len(e.rec.Route) + len(e.rec.Point)
	for k, v := range e.rec.Data {
		kept += len(k) + len(v)
	}
	for k, v := range e.rec.Response.Header {
		kept += len(k) + len(v)
	}
	if int64(kept) > e.size {
		t.Errorf("an entry keeps %d bytes of strings and bodies but counts %d", kept, e.size)
	}
	if got, ok := c.get(m, rec.Key, time.Now()); !ok || got.Fingerprint != "f" || string(got.Response.Body) != `{}` {
		t.Errorf("get() = %+v, %v; want the record's fingerprint and answer", got, ok)
	}
}
