package token

import (
	"slices"
	"testing"
)

func TestParseScopes(t *testing.T) {
	for _, tc := range []struct {
		scope, base, profile string
		want                 []string // Scope.String; nil with err
		err                  bool
	}{
		{"storage.read:/store", "", "wlcg", []string{"storage.read:/store"}, false},
		{"storage.read", "", "wlcg", []string{"storage.read:/"}, false},
		{"storage.read:/", "/cms", "wlcg", []string{"storage.read:/cms"}, false},
		{"storage.read:/store storage.create:/store/user storage.modify:/tmp storage.stage:/tape", "/", "wlcg",
			[]string{"storage.read:/store", "storage.create:/store/user", "storage.modify:/tmp", "storage.stage:/tape"}, false},
		{"storage.read://store//x/", "/base/", "wlcg", []string{"storage.read:/base/store/x"}, false},
		{"openid offline_access compute.create wlcg.groups:/cms storage.write:/x eduperson_scoped", "", "wlcg", nil, false},
		{"  storage.read:/a   storage.read:/a  ", "", "wlcg", []string{"storage.read:/a"}, false},
		{"read:/data write:/data/out", "/b", "scitokens", []string{"storage.read:/b/data", "storage.create:/b/data/out", "storage.modify:/b/data/out"}, false},
		{"read:/data write:/data/out", "", "wlcg", nil, false}, // SciTokens names mean nothing in a WLCG token
		{"storage.read:/x read", "", "scitokens", []string{"storage.read:/x", "storage.read:/"}, false},
		{"storage.read:/../etc", "", "wlcg", nil, true},
		{"storage.read:/a/..", "", "wlcg", nil, true},
		{"storage.read:/a/./b", "", "wlcg", nil, true},
		{"read:..", "", "scitokens", nil, true},
		{"storage.read:etc", "", "wlcg", nil, true},
		{"storage.read:", "", "wlcg", nil, true},
		{"storage.read:/a\x00b", "", "wlcg", nil, true},
		{"storage.read:/a\x7f", "", "wlcg", nil, true},
		{"openid storage.read:/ok storage.modify:/../x", "", "wlcg", nil, true}, // one bad scope refuses all
		{"compute.read:/../x", "", "wlcg", nil, false},                          // not ours to judge
		{"storage.read:/x", "relative", "wlcg", nil, true},
		{"storage.read:/x", "", "oauth", nil, true},
	} {
		got, err := ParseScopes(tc.scope, tc.base, tc.profile)
		if (err != nil) != tc.err {
			t.Errorf("ParseScopes(%q, %q, %q) error %v", tc.scope, tc.base, tc.profile, err)
			continue
		}
		var s []string
		for _, sc := range got {
			s = append(s, sc.String())
		}
		if !slices.Equal(s, tc.want) {
			t.Errorf("ParseScopes(%q, %q, %q) = %q, want %q", tc.scope, tc.base, tc.profile, s, tc.want)
		}
	}
	if _, err := ParseScopes("storage.read:/..", "", "wlcg"); reason(err) != "bad scope" {
		t.Errorf("error %v, want reason bad scope", err)
	}
}
