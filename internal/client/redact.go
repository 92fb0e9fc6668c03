package client

import (
	"net/url"
	"strings"
)

// sensitiveParams are query parameters that carry credentials: the bearer
// token XrdHttp and Pelican take as authz (also root:// CGI), OAuth's
// access_token, and what makes an S3 presigned URL work.
var sensitiveParams = map[string]bool{
	"authz":                true,
	"access_token":         true,
	"x-amz-signature":      true,
	"x-amz-credential":     true,
	"x-amz-security-token": true,
}

// Redact is u as logs and error messages may show it: url.URL.Redacted
// (no password) with the value of every credential-carrying query
// parameter replaced by "xxxxx". The other parameters stay byte for byte.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.RawQuery == "" || !hasSensitive(u.RawQuery) {
		return u.Redacted()
	}
	v := *u
	parts := strings.Split(v.RawQuery, "&")
	for i, kv := range parts {
		k, _, ok := strings.Cut(kv, "=")
		if ok && isSensitive(k) {
			parts[i] = k + "=xxxxx"
		}
	}
	v.RawQuery = strings.Join(parts, "&")
	return v.Redacted()
}

func hasSensitive(rawQuery string) bool {
	for kv := range strings.SplitSeq(rawQuery, "&") {
		if k, _, _ := strings.Cut(kv, "="); isSensitive(k) {
			return true
		}
	}
	return false
}

func isSensitive(k string) bool {
	if uk, err := url.QueryUnescape(k); err == nil {
		k = uk
	}
	return sensitiveParams[strings.ToLower(k)]
}
