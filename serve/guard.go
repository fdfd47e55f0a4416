package serve

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// uploadPath is the one endpoint whose body is multipart/form-data.
const uploadPath = "/v1/tasks/video/upload"

// hostName is one entry of Config.PublicHosts: a DNS name (lower case,
// no trailing dot) and, when port is not 0, the one port it is reached on.
type hostName struct {
	name string
	port int
}

// parsePublicHosts reads the entries of --public-host: NAME or NAME:PORT.
func parsePublicHosts(list []string) ([]hostName, error) {
	var out []hostName
	for _, e := range list {
		name, port, err := splitHost(e)
		if strings.ContainsAny(e, "/@?#") || err == nil && (name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-._") != "") {
			err = errors.New("not a host name (no scheme, path or wildcard)")
		}
		if err != nil {
			return nil, fmt.Errorf("--public-host %q: %v: give NAME or NAME:PORT, as clients write it in their URLs", e, err)
		}
		out = append(out, hostName{name, port})
	}
	return out, nil
}

// splitHost splits a Host header (or a --public-host entry) into its name,
// lower case without a trailing dot or IPv6 brackets, and its port (0 when
// absent).
func splitHost(h string) (string, int, error) {
	name, p, err := net.SplitHostPort(h)
	if err != nil { // no port
		name, p = h, ""
	}
	port := 0
	if p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", 0, fmt.Errorf("bad port %q", p)
		}
		port = int(n)
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	return strings.ToLower(name), port, nil
}

// hostAllowed reports whether a request's Host header names this service:
// an IP address (in any spelling, any port: a browser sends an address
// only when its URL has one, so a rebound DNS name never passes as one),
// localhost or a name under .localhost, or one of hosts (its port too
// when it has one). An empty Host (HTTP/1.0) passes.
func hostAllowed(host string, hosts []hostName) bool {
	if host == "" {
		return true
	}
	name, port, err := splitHost(host)
	if err != nil {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	return inHosts(hosts, name, port)
}

// inHosts reports whether name and port are one of hosts.
func inHosts(hosts []hostName, name string, port int) bool {
	for _, h := range hosts {
		if h.name == name && (h.port == 0 || h.port == port) {
			return true
		}
	}
	return false
}

// sameOrigin reports whether origin (an Origin header) is the service's
// own: its host and port are the request's Host, or one of hosts (a
// reverse proxy that rewrites Host). A page on another port of the same
// machine is another origin.
func sameOrigin(origin, host string, hosts []hostName) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return false // "null" among them: a sandboxed frame, a file, a redirect
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	if u.Port() == "" { // the default port, which a Host may spell out
		if p := map[string]string{"http": ":80", "https": ":443"}[u.Scheme]; strings.EqualFold(u.Host+p, host) {
			return true
		}
	}
	name, port, err := splitHost(u.Host)
	if err != nil {
		return false
	}
	return inHosts(hosts, name, port)
}

// guard keeps browsers on other sites and rebound host names away from
// the service, before the token is checked (auth), on every endpoint but
// /healthz and /health:
//
//   - The Host header must name the service (hostAllowed): else 421
//     Misdirected Request. A DNS name an attacker rebinds to this machine
//     thus reads nothing, token or not.
//   - A request that may change something (any method but GET, HEAD and
//     OPTIONS) is refused with 403 when it comes from another site's page:
//     Sec-Fetch-Site cross-site or same-site, or an Origin that is not the
//     service's own (sameOrigin). Clients that send neither (curl,
//     scripts, Go) and the service's own page pass.
//   - Such a request's body, when it has one, must be application/json
//     (multipart/form-data on the upload endpoint): else 415. The content
//     types a page may send to another site without asking it first (a
//     CORS "simple request": text/plain, form-urlencoded, multipart) are
//     thus refused even from a browser that sends no Origin.
func (a *api) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		if code, msg := a.refusal(r); code != 0 {
			writeError(w, code, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal returns guard's answer to r, or 0 when r passes.
func (a *api) refusal(r *http.Request) (int, string) {
	if !hostAllowed(r.Host, a.hosts) {
		name, _, _ := splitHost(r.Host)
		return http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not a name of this service: reach it by IP address or localhost, or start vsr serve with --public-host %s if clients use that name", r.Host, name)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return 0, ""
	}
	const own = "only the service's own page may change anything from a browser"
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return http.StatusForbidden, fmt.Sprintf("%s %s from a page of another site (Sec-Fetch-Site: %s) refused: %s", r.Method, r.URL.Path, site, own)
	}
	if o := r.Header.Values("Origin"); len(o) > 0 && !sameOrigin(o[0], r.Host, a.hosts) {
		return http.StatusForbidden, fmt.Sprintf("%s %s from a page of another origin (Origin: %s) refused: %s", r.Method, r.URL.Path, o[0], own)
	}
	if r.ContentLength == 0 {
		return 0, ""
	}
	want := "application/json"
	if r.URL.Path == uploadPath {
		want = "multipart/form-data"
	}
	ct := r.Header.Get("Content-Type")
	if got, _, _ := mime.ParseMediaType(ct); got == want {
		return 0, ""
	}
	if ct == "" {
		ct = "none"
	}
	return http.StatusUnsupportedMediaType, fmt.Sprintf("%s %s takes a body of Content-Type %s, not %s: send it with that header", r.Method, r.URL.Path, want, ct)
}
