package idempotency

import (
	"container/list"
	"sync"
	"time"
)

// Cache keeps COMPLETED records in memory, so that a warm function answers a
// replay (the same request again) or a mismatch (the key with another
// request: 422) without a store round trip. A COMPLETED record never changes
// until it expires (nothing but a new request after its expiry may replace
// it), so a cached record is exact for as long as it lives: an entry serves
// only until the record's ExpiresAt truncated to the millisecond (as the
// stores keep it), by the Middleware's clock, and is keyed
// by the scoped key (tenant and key hash), so tenants never share entries,
// and by the Middleware that put it: one Cache may serve several
// Middlewares (over different stores, or clocks), each seeing only the
// records it stored or read itself, never another's, and sharing the bounds.
// The Cache holds at most a number of entries and of bytes, evicting the
// least recently used. It is safe for concurrent use; the zero value is not
// usable: call NewCache.
type Cache struct {
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	bytes int64
	lru   *list.List                 // of *cacheEntry, most recent first
	byID  map[cacheKey]*list.Element // by owner and Key.ID()
}

// cacheKey names an entry: the Middleware that put it (its store's record)
// and the record's Key.ID().
type cacheKey struct {
	owner *Middleware
	id    string
}

type cacheEntry struct {
	key  cacheKey
	rec  Record
	size int64
}

// NewCache returns a Cache of at most maxEntries records and maxBytes bytes
// of responses (each at least 1).
func NewCache(maxEntries int, maxBytes int64) *Cache {
	return &Cache{maxEntries: max(maxEntries, 1), maxBytes: max(maxBytes, 1), lru: list.New(), byID: map[cacheKey]*list.Element{}}
}

// get returns the COMPLETED record of key that owner put, if the cache has
// it and it has not expired at now.
func (c *Cache) get(owner *Middleware, key Key, now time.Time) (Record, bool) {
	if c == nil {
		return Record{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[cacheKey{owner, key.ID()}]
	if !ok {
		return Record{}, false
	}
	e := el.Value.(*cacheEntry)
	if e.rec.Expired(now) {
		c.remove(el)
		return Record{}, false
	}
	c.lru.MoveToFront(el)
	return e.rec, true
}

// put keeps rec, a COMPLETED record with its response, for owner, the
// Middleware that stored or read it; anything else is ignored, as is a
// record larger than the whole cache.
func (c *Cache) put(owner *Middleware, rec Record) {
	if c == nil || rec.Status != StatusCompleted || rec.Response == nil {
		return
	}
	size := int64(len(rec.Response.Body) + len(rec.Fingerprint) + len(rec.Key.ID()) + len(rec.Route) + len(rec.Point) + 256)
	for k, v := range rec.Response.Header {
		size += int64(len(k) + len(v))
	}
	for _, v := range rec.Response.SetCookie {
		size += int64(len(v))
	}
	if size > c.maxBytes {
		return
	}
	rec = cloneRecord(rec)
	// Replays and mismatches need neither the canonical request nor the
	// phases' data, which may be hundreds of kilobytes: keep them out of
	// memory (and so out of the bytes counted below).
	rec.Request, rec.Data = nil, nil
	// Stores keep the expiry to the millisecond (the DynamoDB store's
	// expires_at_ms, the memory store's), and the stored record expires at
	// that: so does its entry, never later.
	rec.ExpiresAt = time.UnixMilli(rec.ExpiresAt.UnixMilli())
	key := cacheKey{owner, rec.Key.ID()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[key]; ok {
		c.remove(el)
	}
	c.byID[key] = c.lru.PushFront(&cacheEntry{key: key, rec: rec, size: size})
	c.bytes += size
	for c.lru.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.remove(c.lru.Back())
	}
}

// Len is the number of records cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func (c *Cache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.byID, e.key)
	c.bytes -= e.size
}
