package serve

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The page of the service (GET /): a single-page app of plain JavaScript
// modules and CSS, embedded in the binary. It loads nothing from another
// host and runs no inline script or style, so that its
// Content-Security-Policy can forbid both. Its files are public (they hold
// no data); every /v1 call it makes carries the bearer token the user
// gives it, kept in the tab's sessionStorage.
//
//go:embed web
var webFiles embed.FS

// pageCSP is the Content-Security-Policy of the page and its files:
// scripts, styles and connections from this origin only, images from it
// or from blob: URLs (the previews, fetched with the token), no frames,
// plugins, forms or base changes.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// pagePath reports whether p is one of the page's public paths: the page
// itself and its files under /web/.
func pagePath(p string) bool {
	return p == "/" || strings.HasPrefix(p, "/web/")
}

// pageHandler serves the page at / and its files under /web/, with the
// page's security headers.
func pageHandler() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/web/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pageCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			writeError(w, http.StatusNotFound, "no file "+r.URL.Path)
			return
		}
		files.ServeHTTP(w, r)
	})
}
