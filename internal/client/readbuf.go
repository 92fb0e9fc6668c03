package client

// ReadBufferSize is the buffer one ranged read (File.ReadAt, ReadAtFunc,
// downloads) holds while it runs, taken from the engine's pool: a caller
// that budgets its memory (the cache, cache.ram) counts it per read in
// flight.
const ReadBufferSize = bufSize
