package httpserve

import (
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/wanda-fed/wanda/internal/auth"
	"github.com/wanda-fed/wanda/internal/checksum"
	"github.com/wanda-fed/wanda/internal/storage"
)

// PROPFIND answers the properties clients use (davix, gfal2, rclone,
// cadaver): displayname, getcontentlength, getlastmodified, creationdate,
// resourcetype, getetag, getcontenttype, and checksums in the dCache form
// (<Checksums xmlns="http://www.dcache.org/2013/webdav">adler32=...</...>)
// that gfal2 and davix read. Checksums cost a full read of a file the first
// time, so they are computed only when the request names the property;
// an allprop request gets them only when already cached.

type propfindReq struct {
	XMLName  xml.Name  `xml:"DAV: propfind"`
	AllProp  *struct{} `xml:"DAV: allprop"`
	PropName *struct{} `xml:"DAV: propname"`
	Prop     *struct {
		Any []struct{ XMLName xml.Name } `xml:",any"`
	} `xml:"DAV: prop"`
}

const maxPropfindBody = 64 << 10

func (h *Handler) propfind(w http.ResponseWriter, r *http.Request) error {
	t, err := h.resolve(r.URL.Path)
	if err != nil {
		return err
	}
	if err := h.authorize(r.Context(), r, auth.List, t); err != nil {
		return err
	}
	depth := 1
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Depth"))) {
	case "0":
		depth = 0
	case "1":
	case "", "infinity":
		w.Header().Set("Content-Type", "application/xml; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, xml.Header+`<D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>`+"\n")
		return nil
	default:
		return Errorf(http.StatusBadRequest, "Depth must be 0 or 1")
	}
	wantSums := false
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPropfindBody+1))
	if err != nil {
		return Errorf(http.StatusBadRequest, "reading PROPFIND body: %v", err)
	}
	if len(body) > maxPropfindBody {
		return Errorf(http.StatusRequestEntityTooLarge, "PROPFIND body larger than %d bytes", maxPropfindBody)
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var req propfindReq
		if err := xml.Unmarshal(body, &req); err != nil {
			return Errorf(http.StatusBadRequest, "PROPFIND body is not a DAV:propfind document: %v", err)
		}
		if req.Prop != nil {
			for _, p := range req.Prop.Any {
				if strings.EqualFold(p.XMLName.Local, "checksums") || strings.EqualFold(p.XMLName.Local, "checksum") {
					wantSums = true
				}
			}
		}
	}

	var entries []storage.FileInfo
	var self storage.FileInfo
	if !t.found {
		kids := h.opts.Namespace.Children(t.logical)
		if kids == nil {
			return errNoExport(t)
		}
		self = storage.FileInfo{Name: storage.Base(t.logical), IsDir: true}
		if depth == 1 {
			for _, k := range kids {
				entries = append(entries, storage.FileInfo{Name: k, Path: storage.Join(t.logical, k), IsDir: true})
			}
		}
	} else {
		be := t.export.Backend
		if self, err = be.Stat(r.Context(), t.rel); err != nil {
			return err
		}
		if depth == 1 && self.IsDir {
			if entries, err = be.List(r.Context(), t.rel); err != nil {
				return err
			}
		}
	}

	if hide := h.hidden(r, t); hide != nil {
		entries = slices.DeleteFunc(entries, func(e storage.FileInfo) bool { return hide("/" + storage.Join(t.logical, e.Name)) })
	}
	ms := multistatus{XmlnsD: "DAV:", XmlnsC: dcacheNS}
	ms.Responses = append(ms.Responses, h.propResponse(r, t, "", self, wantSums))
	for _, e := range entries {
		ms.Responses = append(ms.Responses, h.propResponse(r, t, e.Name, e, wantSums))
	}
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.WriteHeader(http.StatusMultiStatus)
	_, _ = io.WriteString(w, xml.Header)
	enc := xml.NewEncoder(w)
	return enc.Encode(ms)
}

const dcacheNS = "http://www.dcache.org/2013/webdav"

type multistatus struct {
	XMLName   xml.Name   `xml:"D:multistatus"`
	XmlnsD    string     `xml:"xmlns:D,attr"`
	XmlnsC    string     `xml:"xmlns:C,attr"`
	Responses []response `xml:"D:response"`
}

type response struct {
	Href     string   `xml:"D:href"`
	Propstat propstat `xml:"D:propstat"`
}

type propstat struct {
	Prop   prop   `xml:"D:prop"`
	Status string `xml:"D:status"`
}

type prop struct {
	DisplayName   string       `xml:"D:displayname"`
	ContentLength *int64       `xml:"D:getcontentlength,omitempty"`
	LastModified  string       `xml:"D:getlastmodified,omitempty"`
	CreationDate  string       `xml:"D:creationdate,omitempty"`
	ETag          string       `xml:"D:getetag,omitempty"`
	ContentType   string       `xml:"D:getcontenttype,omitempty"`
	ResourceType  resourceType `xml:"D:resourcetype"`
	Checksums     string       `xml:"C:Checksums,omitempty"`
}

type resourceType struct {
	Collection *struct{} `xml:"D:collection"`
}

func (h *Handler) propResponse(r *http.Request, t target, child string, fi storage.FileInfo, wantSums bool) response {
	logical := t.logical
	if child != "" {
		logical = storage.Join(logical, child)
	}
	href := (&url.URL{Path: "/" + logical}).EscapedPath()
	var p prop
	p.DisplayName = fi.Name
	if !fi.ModTime.IsZero() {
		p.LastModified = fi.ModTime.UTC().Format(http.TimeFormat)
		p.CreationDate = fi.ModTime.UTC().Format(time.RFC3339)
	}
	if fi.IsDir {
		p.ResourceType.Collection = &struct{}{}
		if !strings.HasSuffix(href, "/") {
			href += "/"
		}
	} else {
		size := fi.Size
		p.ContentLength = &size
		p.ETag = ETag(fi)
		p.ContentType = contentType(logical)
		if t.found {
			p.Checksums = h.propChecksums(r, t, child, wantSums)
		}
	}
	return response{Href: href, Propstat: propstat{Prop: p, Status: "HTTP/1.1 200 OK"}}
}

// propChecksums lists "alg=hex" pairs: computed when asked, else only what
// the backend has cached.
func (h *Handler) propChecksums(r *http.Request, t target, child string, compute bool) string {
	rel := t.rel
	if child != "" {
		rel = storage.Join(rel, child)
	}
	var parts []string
	be := t.export.Backend
	if compute {
		if cs, ok := be.(storage.Checksummer); ok {
			if sum, err := cs.Checksum(r.Context(), rel, checksum.Adler32); err == nil {
				parts = append(parts, checksum.Adler32+"="+checksum.Hex(sum))
			} else if !errors.Is(err, storage.ErrUnsupported) {
				h.log.Debug("propfind checksum", "path", rel, "err", err)
			}
		}
		return strings.Join(parts, ",")
	}
	if cc, ok := be.(storage.CachedChecksummer); ok {
		for _, alg := range checksum.Names {
			if sum, ok := cc.CachedChecksum(r.Context(), rel, alg); ok {
				parts = append(parts, alg+"="+checksum.Hex(sum))
			}
		}
	}
	return strings.Join(parts, ",")
}
