// Package srrtest checks documents against the WLCG SRR schema, a
// fixture written for wanda's tests from the WLCG storage resource
// reporting proposal (srr-schema.json).
package srrtest

import (
	"bytes"
	_ "embed"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed srr-schema.json
var schemaJSON []byte

var (
	once   sync.Once
	schema *jsonschema.Schema
	bad    error
)

func compile() {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		bad = err
		return
	}
	c := jsonschema.NewCompiler()
	if bad = c.AddResource("srr-schema.json", v); bad != nil {
		return
	}
	schema, bad = c.Compile("srr-schema.json")
}

// Validate fails t unless doc follows the SRR schema.
func Validate(t testing.TB, doc []byte) {
	t.Helper()
	once.Do(compile)
	if bad != nil {
		t.Fatalf("the SRR schema fixture: %v", bad)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("the SRR document is not JSON: %v\n%s", err, doc)
	}
	if err := schema.Validate(v); err != nil {
		t.Fatalf("the SRR document does not follow the schema: %v\n%s", err, doc)
	}
}
