package transfer

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/wanda-fed/wanda/internal/monitor"
	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// FTS3's views (fts3view.go) are written directly, compact, as FTS3
// writes them: encoding/json re-validates the output of every
// MarshalJSON at every level of nesting, and a bulk query's answer of
// 10,000 files took 0.7 s that way (BenchmarkBulkQuery).

// writeFTS answers v (objects, lists, scalars) as JSON.
func writeFTS(w http.ResponseWriter, code int, v any) {
	b := appendJSON(make([]byte, 0, 64<<10), v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// appendJSON appends v's JSON to b. json.RawMessage is appended as it
// is: the service stores only JSON it has parsed.
func appendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case object:
		b = append(b, '{')
		for i, m := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.k)
			b = append(b, ':')
			b = appendJSON(b, m.v)
		}
		return append(b, '}')
	case []object:
		return appendList(b, x, func(b []byte, o object) []byte { return appendJSON(b, o) })
	case []string:
		return appendList(b, x, appendString)
	case []any:
		return appendList(b, x, appendJSON)
	case string:
		return appendString(b, x)
	case store.FileState:
		return appendString(b, string(x))
	case store.JobState:
		return appendString(b, string(x))
	case bool:
		return strconv.AppendBool(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return append(b, "null"...)
		}
		if a := math.Abs(x); a != 0 && (a < 1e-6 || a >= 1e21) {
			return strconv.AppendFloat(b, x, 'e', -1, 64)
		}
		return strconv.AppendFloat(b, x, 'f', -1, 64)
	case json.RawMessage:
		if len(x) == 0 {
			return append(b, "null"...)
		}
		return append(b, x...)
	}
	m, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, m...)
}

// appendString appends s as a JSON string (as encoding/json writes it,
// minus its HTML escaping).
func appendString(b []byte, s string) []byte { return monitor.AppendJSONString(b, s) }

// appendList appends xs as a JSON array, each element by f.
func appendList[T any](b []byte, xs []T, f func([]byte, T) []byte) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = f(b, x)
	}
	return append(b, ']')
}
