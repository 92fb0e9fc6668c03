package app_test

import "github.com/wanda-fed/wanda/internal/testserver"

// A `wanda server` child process (testserver.StartProcess) is this test
// binary run as the command line.
func init() { testserver.RunIfChild() }
