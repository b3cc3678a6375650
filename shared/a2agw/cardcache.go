package a2agw

import (
	"context"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/cards"
)

// The card cache. Card GETs are public (no token, no rate budget) and each
// would be one database read, so every instance keeps the answers it read
// (a published card or the 404 of an unpublished or nonexistent agent) for
// CardCacheTTL, at most CardCacheSize of them (a full cache drops a random
// entry). Concurrent misses of one agent share one read. A flood of card
// GETs thus costs at most one read per agent per TTL per instance, and a
// flood of distinct ids at most one read each, as before. A card published,
// edited or withdrawn shows at the card URL within the TTL (its clients
// already reuse it for Cache-Control's max-age). Method calls do not use
// the cache: the gate reads the card afresh, so a withdrawn card stops
// admitting callers at once.

// Defaults of the card cache.
const (
	DefaultCardCacheTTL  = 10 * time.Second
	DefaultCardCacheSize = 1000
)

// cardEntry is one cached answer; done is closed once it is read (the
// fields are then set and never change).
type cardEntry struct {
	done    chan struct{}
	card    cards.Published
	ok      bool
	err     error
	expires time.Time
}

// cardCache maps agent ids to their card answers.
type cardCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time
	// read is the database read of one card (Gateway.published).
	read func(ctx context.Context, target string) (cards.Published, bool, error)

	mu      sync.Mutex
	entries map[string]*cardEntry
}

func newCardCache(ttl time.Duration, size int, read func(context.Context, string) (cards.Published, bool, error)) *cardCache {
	if ttl == 0 {
		ttl = DefaultCardCacheTTL
	}
	if size <= 0 {
		size = DefaultCardCacheSize
	}
	return &cardCache{ttl: ttl, size: size, now: time.Now, read: read, entries: map[string]*cardEntry{}}
}

// get answers target's card from the cache, or reads it once for every
// concurrent caller. A failed read is not kept. A negative ttl turns the
// cache off.
func (c *cardCache) get(ctx context.Context, target string) (cards.Published, bool, error) {
	if c.ttl < 0 {
		return c.read(ctx, target)
	}
	c.mu.Lock()
	e, hit := c.entries[target]
	if hit {
		select {
		case <-e.done:
			if !c.now().Before(e.expires) {
				hit = false // stale: read again below
			}
		default: // being read: wait for it below
		}
	}
	if !hit {
		if len(c.entries) >= c.size {
			c.evict()
		}
		e = &cardEntry{done: make(chan struct{})}
		c.entries[target] = e
		c.mu.Unlock()
		// The read belongs to every waiter, not to this request: its
		// cancellation must not fail theirs.
		e.card, e.ok, e.err = c.read(context.WithoutCancel(ctx), target)
		e.expires = c.now().Add(c.ttl)
		close(e.done)
		if e.err != nil {
			c.mu.Lock()
			if c.entries[target] == e {
				delete(c.entries, target)
			}
			c.mu.Unlock()
		}
		return e.card, e.ok, e.err
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		return e.card, e.ok, e.err
	case <-ctx.Done():
		return cards.Published{}, false, ctx.Err()
	}
}

// evict drops expired entries, or, when none is, one entry at random (Go's
// map order); c.mu is held. Entries being read are kept: their readers
// hold them anyway.
func (c *cardCache) evict() {
	now := c.now()
	dropped := false
	for id, e := range c.entries {
		select {
		case <-e.done:
			if !now.Before(e.expires) {
				delete(c.entries, id)
				dropped = true
			}
		default:
		}
	}
	if dropped {
		return
	}
	for id, e := range c.entries {
		select {
		case <-e.done:
			delete(c.entries, id)
			return
		default:
		}
	}
}
