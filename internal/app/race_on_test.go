//go:build race

package app_test

// raceEnabled: the race detector multiplies memory; RSS bounds do not hold.
const raceEnabled = true
