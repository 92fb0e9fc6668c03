package monitor

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends rec as one JSON object, as encoding/json would write
// it (the same keys, omitempty where the struct says so), without
// reflection: the writer goroutine encodes every record, and at tens of
// thousands of requests a second its time is the process's.
func appendJSON(b []byte, rec *Record) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, rec.Type)
	b = append(b, `,"id":`...)
	b = strconv.AppendUint(b, rec.ID, 10)
	b = append(b, `,"start":`...)
	b = appendTime(b, rec.Start)
	b = append(b, `,"end":`...)
	b = appendTime(b, rec.End)
	b = append(b, `,"duration_s":`...)
	b = strconv.AppendFloat(b, rec.Duration, 'g', -1, 64)
	b = appendField(b, "role", rec.Role, false)
	b = appendField(b, "server", rec.Server, true)
	b = appendField(b, "site", rec.Site, true)
	b = appendField(b, "protocol", rec.Protocol, false)
	b = appendField(b, "op", rec.Op, false)
	b = appendField(b, "client", rec.Client, true)
	b = appendField(b, "user", rec.User, false)
	b = appendField(b, "path", rec.Path, false)
	b = appendInt(b, "size", rec.Size, false)
	b = appendInt(b, "bytes_read", rec.BytesRead, false)
	b = appendInt(b, "bytes_written", rec.BytesWritten, false)
	b = appendInt(b, "reads", rec.Reads, false)
	b = appendInt(b, "read_bytes", rec.ReadBytes, false)
	b = appendInt(b, "readvs", rec.Readvs, false)
	b = appendInt(b, "readv_segments", rec.ReadvSegs, false)
	b = appendInt(b, "readv_bytes", rec.ReadvBytes, false)
	b = appendInt(b, "writes", rec.Writes, false)
	b = appendInt(b, "write_bytes", rec.WriteBytes, false)
	b = appendField(b, "result", rec.Result, false)
	b = appendField(b, "error_class", rec.ErrorClass, true)
	b = appendInt(b, "status", int64(rec.Status), true)
	b = appendField(b, "redirect", rec.Redirect, true)
	if len(rec.Chain) > 0 {
		b = append(b, `,"chain":[`...)
		for i, c := range rec.Chain {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, ']')
	}
	b = appendInt(b, "cache_hit_bytes", rec.CacheHitBytes, true)
	b = appendInt(b, "cache_miss_bytes", rec.CacheMissBytes, true)
	b = appendField(b, "source", rec.Source, true)
	b = appendField(b, "destination", rec.Destination, true)
	b = appendField(b, "mode", rec.Mode, true)
	return append(b, '}')
}

func appendField(b []byte, key, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

func appendInt(b []byte, key string, v int64, omitEmpty bool) []byte {
	if omitEmpty && v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendTime writes t as encoding/json does (RFC 3339 with nanoseconds).
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped (as encoding/json does, minus its HTML escaping).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
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
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
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
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendJSONString is appendString for other packages' hand-written
// JSON (the transfer service's FTS3 views).
func AppendJSONString(b []byte, s string) []byte { return appendString(b, s) }
