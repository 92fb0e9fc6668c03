package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/fed"
)

// fedCall sends one federation API request and decodes the JSON answer.
func fedCall(ctx context.Context, method, u, token string, body, out any) error {
	return fedCallWith(ctx, http.DefaultClient, method, u, token, body, out)
}

// fedCallWith is fedCall with the client hc (the TLS settings of the
// credential flags).
func fedCallWith(ctx context.Context, hc *http.Client, method, u, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e fed.Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: not a federation API answer: %w", u, err)
	}
	return nil
}

// baseAndPath splits http://host:port/logical/path.
func baseAndPath(s string) (base, p string, err error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", usagef("%q is not an http:// or https:// URL", s)
	}
	p = u.Path
	if p == "" {
		p = "/"
	}
	return u.Scheme + "://" + u.Host, p, nil
}

func newLocateCmd() *cobra.Command {
	var asJSON bool
	var cf credFlags
	cmd := &cobra.Command{
		Use:   "locate URL",
		Short: "List every replica of a file the federation knows, with each site's local path",
		Long: `Ask a redirector (or a server) where a logical file is:

  wanda locate http://redirector:1095/store/data/run1/events.root

Every member that has it is listed with its data URL and the path it keeps
the file at in its own layout. Exit status 1 when nobody has it.`,
		Args: nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, p, err := baseAndPath(args[0])
			if err != nil {
				return err
			}
			q := url.Values{fed.ParamPath: {p}, fed.ParamAll: {"1"}}
			// A protected site answers readers of the path: the bearer
			// token and the TLS settings, found as the other client verbs
			// find them (the token goes to the host named only).
			tok := ""
			src, err := cred.DiscoverToken(cf.token)
			if err != nil {
				return err
			}
			if src != nil {
				if tok, err = src.Token(); err != nil {
					return err
				}
			}
			hc, err := cf.httpClient(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})))
			if err != nil {
				return err
			}
			var loc fed.Located
			if err := fedCallWith(cmd.Context(), hc, http.MethodGet, base+"/api/v1/locate?"+q.Encode(), tok, nil, &loc); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(loc); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "URL\tLOCAL PATH\tSIZE\tMODIFIED\tLABELS\tVIA")
				for _, r := range loc.Replicas {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.URL, dash(r.LocalPath), r.Size,
						r.ModTime.UTC().Format(time.RFC3339), labelString(r.Labels), dash(strings.Join(r.Via, " -> ")))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				for _, e := range loc.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), "wanda: warning:", e)
				}
			}
			switch loc.Status {
			case fed.Found:
				return nil
			case fed.NotFound:
				return fmt.Errorf("%s: not found in the federation", p)
			}
			return fmt.Errorf("%s: not every member answered; the list may be incomplete", p)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	cf.add(cmd)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func labelString(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	var kv []string
	for k, v := range l {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}

func newTopologyCmd() *cobra.Command {
	var asJSON bool
	var depth int
	cmd := &cobra.Command{
		Use:   "topology URL",
		Short: "Show the federation tree below a redirector, with health and load",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, _, err := baseAndPath(args[0])
			if err != nil {
				return err
			}
			var n fed.Node
			if err := fedCall(cmd.Context(), http.MethodGet, fmt.Sprintf("%s/api/v1/topology?depth=%d", base, depth), "", nil, &n); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(n)
			}
			printNode(cmd.OutOrStdout(), n, "", "", true)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the tree as JSON")
	cmd.Flags().IntVar(&depth, "depth", 8, "levels of redirectors to descend (1-16)")
	return cmd
}

func printNode(w io.Writer, n fed.Node, first, rest string, root bool) {
	state := "ok"
	switch {
	case !n.Healthy:
		state = "DOWN"
	case n.Drained:
		state = "drained"
	}
	var ex []string
	for _, e := range n.Exports {
		s := e.Prefix
		if e.ReadOnly {
			s += "(ro)"
		}
		ex = append(ex, s)
	}
	line := fmt.Sprintf("%s %s [%s] exports=%s active=%d free=%s", n.Role, n.URL, state, strings.Join(ex, ","), n.Load.Active, fmtBytes(n.Load.FreeBytes))
	if len(n.Labels) > 0 {
		line += " " + labelString(n.Labels)
	}
	if !root {
		line += fmt.Sprintf(" seen %.1fs ago", float64(n.AgeMS)/1000)
	}
	if n.Static {
		line += " static"
	}
	if n.Error != "" {
		line += " error: " + n.Error
	}
	fmt.Fprintln(w, first+line)
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printNode(w, c, rest+"└── ", rest+"    ", false)
		} else {
			printNode(w, c, rest+"├── ", rest+"│   ", false)
		}
	}
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newAdminCmd() *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:   "admin drain|undrain|remove|add|members REDIRECTOR [MEMBER]",
		Short: "Manage a redirector's members: drain, undrain, remove, add static, list",
		Long: `Manage the members of a redirector. MEMBER is a member's ID or URL.

  wanda admin members http://redirector:1095
  wanda admin drain   http://redirector:1095 http://server3:1094
  wanda admin undrain http://redirector:1095 http://server3:1094
  wanda admin remove  http://redirector:1095 http://server3:1094
  wanda admin add     http://redirector:1095 http://nginx:8080=/store,/user:ro

A drained member gets no new clients; transfers in progress finish. A
removed member is told so and stops sending heartbeats until it restarts.
The admin API needs redirector.admin_token (--token or WANDA_ADMIN_TOKEN)
unless called from the redirector's own host.`,
		Args: nArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == "" {
				token = strings.TrimSpace(os.Getenv("WANDA_ADMIN_TOKEN"))
			}
			base, _, err := baseAndPath(args[1])
			if err != nil {
				return err
			}
			var members []fed.MemberStatus
			switch action := args[0]; action {
			case "members":
				if len(args) != 2 {
					return usagef("admin members takes only the redirector URL")
				}
				err = fedCall(cmd.Context(), http.MethodGet, base+"/api/v1/members", "", nil, &members)
			case "drain", "undrain", "remove", "add":
				if len(args) != 3 {
					return usagef("admin %s needs the member: wanda admin %s REDIRECTOR MEMBER", action, action)
				}
				req := fed.AdminRequest{Version: fed.Version, Member: args[2]}
				if action == "add" {
					sm, err := parseStaticMember(args[2])
					if err != nil {
						return err
					}
					m := &fed.Member{URL: sm.URL, XRootD: sm.XRootD}
					for _, e := range sm.Exports {
						m.Exports = append(m.Exports, fed.Export{Prefix: e.Prefix, ReadOnly: e.ReadOnly})
					}
					req.Member, req.Add = sm.URL, m
				}
				err = fedCall(cmd.Context(), http.MethodPost, base+"/api/v1/admin/"+action, token, req, &members)
			default:
				return usagef("admin: unknown action %q (drain, undrain, remove, add, members)", action)
			}
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MEMBER\tROLE\tSTATE\tSEEN\tACTIVE\tFREE\tEXPORTS")
			for _, m := range members {
				state := "ok"
				switch {
				case !m.Healthy:
					state = "down"
				case m.Drained:
					state = "drained"
				}
				if m.Static {
					state += ",static"
				}
				var ex []string
				for _, e := range m.Exports {
					ex = append(ex, e.Prefix)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, m.Role, state,
					time.Since(m.LastSeen).Round(100*time.Millisecond), m.Load.Active, fmtBytes(m.Load.FreeBytes), strings.Join(ex, ","))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "admin bearer token (or WANDA_ADMIN_TOKEN)")
	return cmd
}
