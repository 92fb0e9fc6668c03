package transfer_test

import (
	"net/http"
	"strings"
	"testing"
)

// Token users do not delegate: their own delegation is null, a request,
// a proxy, a removal or a VOMS request is refused (403 Certificate
// required), another identity's id is refused whatever the method; and
// their submissions need no delegation.
func TestFTSDelegationTokens(t *testing.T) {
	e := startFTS(t)
	_, b := e.do(t, "GET", "/whoami", e.robot, nil)
	dlg := decode[map[string]any](t, b)["delegation_id"].(string)
	if code, b := e.do(t, "GET", "/delegation/"+dlg, e.robot, nil); code != 200 || strings.TrimSpace(string(b)) != "null" {
		t.Fatalf("GET /delegation/%s: %d %s", dlg, code, b)
	}
	for _, p := range []string{"GET /delegation/%s/request", "PUT /delegation/%s/credential", "POST /delegation/%s/credential",
		"DELETE /delegation/%s", "POST /delegation/%s/voms"} {
		method, path, _ := strings.Cut(p, " ")
		code, b := e.do(t, method, strings.ReplaceAll(path, "%s", dlg), e.robot, "[]")
		if code != http.StatusForbidden || !strings.Contains(string(b), "Certificate required") {
			t.Errorf("%s as a token user: %d %s", p, code, b)
		}
		code, b = e.do(t, method, strings.ReplaceAll(path, "%s", "0123456789abcdef"), e.robot, "[]")
		if code != http.StatusForbidden {
			t.Errorf("%s of another identity: %d %s", p, code, b)
		}
	}
	src := e.put(t, 0, "tok/a", []byte("data"))
	body := `{"files": [{"sources": ["` + src + `"], "destinations": ["` + e.davs(1, "tok/a") + `"]}]}`
	if code, b := e.do(t, "POST", "/jobs", e.robot, body); code != 200 {
		t.Errorf("a token user's submission: %d %s", code, b)
	}
}
