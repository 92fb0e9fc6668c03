package cli

import (
	"io"
	"testing"
)

// --records is on every role (the records' contract).
func TestRecordsFlagOnEveryRole(t *testing.T) {
	root := newRoot(io.Discard, io.Discard)
	for _, path := range [][]string{{"server"}, {"redirector"}, {"cache"}, {"transfer", "serve"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatalf("%v: %v", path, err)
		}
		for _, f := range []string{"records", "records-collector", "records-progress"} {
			if cmd.Flags().Lookup(f) == nil {
				t.Errorf("wanda %v has no --%s", path, f)
			}
		}
	}
}
