package transfer

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"unicode/utf8"

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
		b = append(b, '[')
		for i, o := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, o)
		}
		return append(b, ']')
	case []string:
		b = append(b, '[')
		for i, s := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		return append(b, ']')
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, e)
		}
		return append(b, ']')
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

// appendString appends s as a JSON string (invalid UTF-8 as U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigit = "0123456789abcdef"
