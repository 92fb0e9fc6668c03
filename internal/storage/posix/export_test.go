package posix

// SetTestHookCreated makes createTemp call fn between creating a temp
// file and locking it; the returned function undoes it.
func SetTestHookCreated(fn func(tmp string)) (undo func()) {
	testHookCreated = fn
	return func() { testHookCreated = nil }
}

// SetTestNoLocks makes the backend behave as on a file system without
// flock; the returned function undoes it.
func SetTestNoLocks() (undo func()) {
	testNoLocks = true
	return func() { testNoLocks = false }
}
