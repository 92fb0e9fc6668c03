package transfer

import (
	"encoding/json"
	"testing"
)

// appendString writes what encoding/json reads back as the string
// encoding/json itself would write.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " back \ slash`, "ctl \x00\x1f\n\r\t", "ünïcödé", "bad \xff\xfe utf-8", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got, want string
		if err := json.Unmarshal(appendString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", appendString(nil, s), err)
		}
		b, _ := json.Marshal(s)
		_ = json.Unmarshal(b, &want)
		if got != want {
			t.Fatalf("%q: read back %q, want %q", s, got, want)
		}
	})
}

// appendJSON writes the views' values as encoding/json reads them.
func TestAppendJSON(t *testing.T) {
	o := object{{"s", "x\"y"}, {"n", 3}, {"f", 0.5}, {"big", 1e22}, {"nil", nil}, {"b", true},
		{"raw", json.RawMessage(`{"a":[1,2]}`)}, {"list", []object{{{"k", "v"}}}}, {"strs", []string{"a", "b"}}, {"any", []any{1, "2"}}}
	var m map[string]any
	if err := json.Unmarshal(appendJSON(nil, o), &m); err != nil {
		t.Fatalf("%s: %v", appendJSON(nil, o), err)
	}
	if m["s"] != "x\"y" || m["n"].(float64) != 3 || m["f"].(float64) != 0.5 || m["big"].(float64) != 1e22 || m["nil"] != nil ||
		m["b"] != true || m["raw"].(map[string]any)["a"].([]any)[1].(float64) != 2 || m["list"].([]any)[0].(map[string]any)["k"] != "v" {
		t.Fatalf("read back %v", m)
	}
}
