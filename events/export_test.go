package events

// CacheSize is how many completed outcomes a manager remembers, for tests
// that need a stale handle to fall out of the cache.
const CacheSize = defaultCacheSize
