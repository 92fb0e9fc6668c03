// Package interop tests wanda against real clients: curl, davix and
// uproot (Python). Each test starts a wanda server in-process on a
// 127.0.0.1:0 listener over the demo data (internal/demo), runs the client
// as a subprocess and checks what it got byte for byte (or value for value,
// for the ROOT file read by uproot).
//
// A missing client skips its tests locally and fails them when the CI
// environment variable is set, so CI cannot pass by silently skipping.
//
//	go test -count=1 -v ./internal/interop/
package interop
