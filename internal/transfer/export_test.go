package transfer

import "github.com/wanda-fed/wanda/internal/transfer/store"

// SetTestHookMoved makes every attempt call fn between its end and its
// record in the store; the returned function undoes it.
func SetTestHookMoved(fn func(store.File, store.Attempt)) (undo func()) {
	testHookMoved = fn
	return func() { testHookMoved = nil }
}
