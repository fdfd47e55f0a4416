package cudnn

import (
	"sync"
)

// Cache keeps one prepared [Conv] per [Shape], so that the algorithm search
// runs once per shape for the life of the cache. It is safe for concurrent
// use; a search holds the cache's lock (searches are rare and short, and
// two searches at once would time each other).
type Cache struct {
	h    *Handle
	opts Options

	mu           sync.Mutex
	m            map[Shape]*Conv
	hits, misses int
	maxWS        int
}

// NewCache returns an empty cache that prepares convolutions with h and
// opts. h is used only for the searches; Forward may use other handles.
func NewCache(h *Handle, opts Options) *Cache {
	return &Cache{h: h, opts: opts, m: map[Shape]*Conv{}}
}

// Get returns the prepared Conv for s, preparing it (and choosing its
// algorithm) on first use. A failed preparation is not cached.
func (c *Cache) Get(s Shape) (*Conv, error) {
	s = s.Normalized()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cv, ok := c.m[s]; ok {
		c.hits++
		return cv, nil
	}
	c.misses++
	cv, err := NewConv(c.h, s, c.opts)
	if err != nil {
		return nil, err
	}
	c.m[s] = cv
	if cv.ws > c.maxWS {
		c.maxWS = cv.ws
	}
	return cv, nil
}

// Lookup returns the cached Conv for s without preparing one.
func (c *Cache) Lookup(s Shape) (*Conv, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cv, ok := c.m[s.Normalized()]
	return cv, ok
}

// Stats returns how many Gets found a prepared Conv (hits) and how many
// had to prepare one (misses).
func (c *Cache) Stats() (hits, misses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// Len returns the number of prepared shapes.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// MaxWorkspace returns the largest WorkspaceSize of the prepared shapes:
// one workspace of this size serves every Forward of the cache.
func (c *Cache) MaxWorkspace() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxWS
}

// Close destroys every prepared Conv and empties the cache. The handle is
// the caller's to close.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cv := range c.m {
		cv.Close()
		delete(c.m, k)
	}
	c.maxWS = 0
	return nil
}
