package transfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/wanda-fed/wanda/internal/transfer/store"
)

// FTS3's endpoint information, identity, storage bans and storage
// configuration.

// APIVersion is the version of FTS3's REST API this service speaks
// (fts-rest-flask's API_VERSION).
var APIVersion = object{{"major", 3}, {"minor", 13}, {"patch", 4}}

// GET /: what the endpoint is (FTS3's clients read it first).
func (s *Service) ftsRoot(w http.ResponseWriter, _ *http.Request, _ Identity) error {
	writeFTS(w, http.StatusOK, object{
		{"delegation", object{{"major", 1}, {"minor", 0}, {"patch", 0}}},
		{"api", APIVersion},
		{"core", nil}, // FTS3's daemons' version: there are none
		{"schema", object{{"major", 2}, {"minor", 0}, {"patch", 0}}},
		{"wanda", "the transfer service of wanda"},
		{"_links", object{
			{"fts:whoami", object{{"href", "/whoami"}, {"title", "Check user certificate"}}},
			{"fts:joblist", object{{"href", "/jobs{?vo_name,user_dn,dlg_id,state_in}"}, {"title", "List of active jobs"}, {"templated", true}}},
			{"fts:job", object{{"href", "/jobs/{id}"}, {"title", "Job information"}, {"templated", true}, {"hints", object{{"allow", []string{"GET", "DELETE"}}}}}},
			{"fts:submitschema", object{{"href", "/api-docs/schema/submit"}, {"title", "JSON schema of messages"}}},
			{"fts:jobsubmit", object{{"href", "/jobs"}, {"title", "Job submission"}, {"hints", object{{"accepted", "application/json"}, {"allow", []string{"POST"}}}}}},
		}},
	})
	return nil
}

// GET /whoami: who the service takes the requester for.
func (s *Service) ftsWhoami(w http.ResponseWriter, _ *http.Request, id Identity) error {
	vos := id.VOs
	if len(vos) == 0 {
		vos = []string{id.VO()}
	}
	vosID := make([]string, len(vos))
	for i, vo := range vos {
		vosID[i] = uuid.NewSHA1(BaseID, []byte(vo)).String()
	}
	level := "vo"
	if id.Admin {
		level = "all"
	}
	fqans := id.FQANs
	if fqans == nil {
		fqans = []string{}
	}
	writeFTS(w, http.StatusOK, object{
		{"user_dn", id.DN}, {"dn", []string{id.DN}}, {"base_id", BaseID.String()}, {"voms_cred", fqans},
		{"vos", vos}, {"vos_id", vosID}, {"roles", []string{}},
		{"level", object{{"transfer", level}, {"deleg", "all"}, {"config", map[bool]string{true: "all", false: "none"}[id.Admin]}}},
		{"delegation_id", id.DelegationID}, {"method", id.Method}, {"is_root", id.Admin},
	})
	return nil
}

// admin refuses what only administrators may do.
func admin(id Identity, what string) error {
	if id.Admin {
		return nil
	}
	return &apiError{code: http.StatusForbidden, msg: fmt.Sprintf("%s: for the service's administrators (transfer serve --admin)", what)}
}

// form reads a request's parameters: a JSON object body, else the query
// and form values.
func form(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, error) {
	if strings.Contains(r.Header.Get("Content-Type"), "json") {
		body, err := readBody(w, r)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, badRequest("malformed input: want a JSON object: %v", err)
		}
		return m, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, badRequest("malformed input: %v", err)
	}
	m := map[string]json.RawMessage{}
	for k, v := range r.Form {
		b, _ := json.Marshal(v[0])
		m[k] = b
	}
	return m, nil
}

// GET /ban/se: the banned storages.
func (s *Service) ftsBans(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "listing banned storages"); err != nil {
		return err
	}
	bans, err := s.st.Bans(r.Context())
	if err != nil {
		return err
	}
	out := make([]object, len(bans))
	for i, b := range bans {
		out[i] = object{{"se", b.SE}, {"message", b.Message}, {"addition_time", ftsTimeOf(b.Added)},
			{"admin_dn", b.AdminDN}, {"vo", b.VO}, {"status", b.Status}}
	}
	writeFTS(w, http.StatusOK, out)
	return nil
}

// POST /ban/se {storage, status: cancel|wait, allow_submit, message,
// timeout}: ban a storage; the ids of the jobs affected.
func (s *Service) ftsBan(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "banning a storage"); err != nil {
		return err
	}
	in, err := form(w, r)
	if err != nil {
		return err
	}
	se, _ := stringOf(in["storage"])
	if se == "" {
		return badRequest("missing storage parameter")
	}
	st := "cancel"
	if v, ok := stringOf(in["status"]); ok && v != "" {
		st = v
	}
	st = strings.ToUpper(st)
	if st != store.BanCancel && st != store.BanWait {
		return badRequest("status %q: cancel or wait", st)
	}
	allow, err := parseFlag(in["allow_submit"])
	if err != nil {
		return badRequest("allow_submit: %v", err)
	}
	if allow && st == store.BanCancel {
		return badRequest("allow_submit and status cancel exclude each other")
	}
	if allow {
		st = store.BanWaitAS
	}
	timeout, _, err := parseInt(in["timeout"])
	if err != nil || timeout < 0 {
		return badRequest("timeout %s: seconds", in["timeout"])
	}
	msg, _ := stringOf(in["message"])
	affected, err := s.st.Ban(r.Context(), store.Ban{SE: se, VO: id.VO(), Status: st, Message: msg, AdminDN: id.DN, Added: s.now(), Timeout: timeout})
	if err != nil {
		return err
	}
	s.log.Warn("storage banned", "se", se, "status", st, "by", id.DN, "jobs", len(affected))
	s.refreshBans(r.Context())
	s.Kick()
	writeFTS(w, http.StatusOK, affected)
	return nil
}

// DELETE /ban/se?storage=...: lift a ban (204).
func (s *Service) ftsUnban(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "lifting a ban"); err != nil {
		return err
	}
	se := r.URL.Query().Get("storage")
	if se == "" {
		return badRequest("missing storage parameter")
	}
	affected, err := s.st.Unban(r.Context(), se)
	if errors.Is(err, store.ErrNotFound) {
		return badRequest("storage %s is not banned", se)
	}
	if err != nil {
		return err
	}
	s.log.Warn("storage unbanned", "se", se, "by", id.DN, "jobs", len(affected))
	s.refreshBans(r.Context())
	s.Kick()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// seInfo are the storage settings FTS3 keeps (t_se), with their JSON
// kinds; wanda acts on inbound_max_active and outbound_max_active.
var seInfo = []struct{ name, kind string }{
	{"inbound_max_active", "int"}, {"inbound_max_throughput", "number"}, {"outbound_max_active", "int"},
	{"outbound_max_throughput", "number"}, {"udt", "int"}, {"ipv6", "int"}, {"se_metadata", "string"},
	{"site", "string"}, {"debug_level", "int"}, {"skip_eviction", "int"}, {"tpc_support", "string"},
	{"overwrite_disk_enabled", "int"}, {"eviction", "int"},
}

// GET /config/se[?se=...]: storages' configuration.
func (s *Service) ftsSEConfig(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "reading storage configuration"); err != nil {
		return err
	}
	cs, err := s.st.SEConfigs(r.Context())
	if err != nil {
		return err
	}
	only := r.URL.Query().Get("se")
	out := object{}
	for _, c := range cs {
		if only != "" && c.SE != only {
			continue
		}
		var info map[string]json.RawMessage
		_ = json.Unmarshal(c.Info, &info)
		iv := object{}
		for _, k := range seInfo {
			var v any
			if raw, ok := info[k.name]; ok {
				v = raw
			}
			iv = append(iv, kv{k.name, v})
		}
		entry := object{{"se_info", iv}}
		if len(c.Operations) > 0 && string(c.Operations) != "{}" {
			entry = append(entry, kv{"operations", json.RawMessage(c.Operations)})
		}
		out = append(out, kv{c.SE, entry})
	}
	writeFTS(w, http.StatusOK, out)
	return nil
}

// POST /config/se {SE: {"se_info": {...}, "operations": {VO: {op: n}}}}:
// set storages' configuration (merged into what is set).
func (s *Service) ftsSetSEConfig(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "configuring a storage"); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var in map[string]struct {
		Info       map[string]json.RawMessage `json:"se_info"`
		Operations map[string]map[string]any  `json:"operations"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return badRequest("malformed configuration: %v", err)
	}
	cs, err := s.st.SEConfigs(r.Context())
	if err != nil {
		return err
	}
	var last []any
	for se, c := range in {
		if strings.TrimSpace(se) == "" {
			return badRequest("malformed configuration: a storage without a name")
		}
		merged := map[string]json.RawMessage{}
		ops := map[string]map[string]any{}
		for _, old := range cs {
			if old.SE == se {
				_ = json.Unmarshal(old.Info, &merged)
				_ = json.Unmarshal(old.Operations, &ops)
			}
		}
		for k, v := range c.Info {
			if isNull(v) {
				continue
			}
			if err := checkSEInfo(k, v); err != nil {
				return err
			}
			merged[k] = v
		}
		for vo, limits := range c.Operations {
			if ops[vo] == nil {
				ops[vo] = map[string]any{}
			}
			for op, n := range limits {
				ops[vo][op] = n
			}
		}
		ib, _ := json.Marshal(merged)
		ob, _ := json.Marshal(ops)
		if err := s.st.SetSEConfig(r.Context(), store.SEConfig{SE: se, Info: ib, Operations: ob}); err != nil {
			return err
		}
		s.log.Info("storage configured", "se", se, "by", id.DN, "se_info", string(ib))
		last = []any{json.RawMessage(ib), json.RawMessage(ob)}
	}
	s.refreshBans(r.Context())
	if last == nil {
		last = []any{nil, nil}
	}
	writeFTS(w, http.StatusOK, last)
	return nil
}

// checkSEInfo refuses a se_info setting FTS3 does not have, or of the
// wrong kind.
func checkSEInfo(k string, v json.RawMessage) error {
	for _, f := range seInfo {
		if f.name != k {
			continue
		}
		switch f.kind {
		case "int":
			if n, _, err := parseInt(v); err != nil || n < 0 {
				return badRequest("malformed configuration: se_info.%s %s: a whole number, not negative", k, v)
			}
		case "number":
			var x float64
			if json.Unmarshal(v, &x) != nil || x < 0 {
				return badRequest("malformed configuration: se_info.%s %s: a number, not negative", k, v)
			}
		case "string":
			s, ok := stringOf(v)
			if !ok || k == "tpc_support" && s != "FULL" && s != "PULL" && s != "PUSH" && s != "NONE" {
				return badRequest("malformed configuration: se_info.%s %s", k, v)
			}
		}
		return nil
	}
	return badRequest("malformed configuration: se_info.%s: no such setting", k)
}

// DELETE /config/se?se=...: remove a storage's configuration (204).
func (s *Service) ftsDeleteSEConfig(w http.ResponseWriter, r *http.Request, id Identity) error {
	if err := admin(id, "configuring a storage"); err != nil {
		return err
	}
	se := r.URL.Query().Get("se")
	if se == "" {
		return badRequest("missing storage (se)")
	}
	if err := s.st.DeleteSEConfig(r.Context(), se); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.refreshBans(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}
