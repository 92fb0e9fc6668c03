package client

import (
	"strings"
	"testing"
)

func TestChallengeText(t *testing.T) {
	for _, c := range []struct{ h, want string }{
		{`Bearer error="invalid_token", error_description="token expired"`, "token expired"},
		{`Bearer realm="wanda", error="invalid_token", error_description="signature, then \"alg\" refused"`, `signature, then "alg" refused`},
		{`Bearer error="insufficient_scope", scope="storage.read:/f storage.stage:/f"`, "insufficient scope: needs storage.read:/f storage.stage:/f"},
		{`Bearer error=invalid_token`, "invalid token"},
		{`Bearer realm="wanda"`, ""},
		{`Basic realm="x", Bearer error="invalid_request"`, "invalid request"},
		{`Negotiate abc123==, Bearer error_description="no"`, "no"},
		{``, ""},
		{`Bearer error_description="unterminated`, "unterminated"},
	} {
		if got := challengeText(c.h); got != c.want {
			t.Errorf("%s: %q, want %q", c.h, got, c.want)
		}
	}
}

func FuzzChallenge(f *testing.F) {
	for _, s := range []string{
		`Bearer error="invalid_token", error_description="token expired"`,
		`Bearer error="insufficient_scope", scope="storage.read:/"`,
		`Basic realm="a\"b", Bearer realm=x,,error=y`,
		`="`, `a=`, `\`, `"\`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got := challengeText(h) // must end, never panic
		if len(got) > len(h)+len("insufficient scope: needs ") {
			t.Fatalf("%q from %q", got, h)
		}
		for k, v := range authParams(h) {
			if strings.ContainsAny(k, "=, \t") || len(v) > len(h) {
				t.Fatalf("param %q=%q from %q", k, v, h)
			}
		}
	})
}
