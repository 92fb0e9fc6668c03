package app_test

import "github.com/wanda-fed/wanda/internal/testproc"

// A `wanda server` child process (testproc.StartProcess) is this test
// binary run as the command line.
func init() { testproc.RunIfChild() }
