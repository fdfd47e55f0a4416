package serve

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// A live session's URLs are parsed once, here, into scheme, user,
// password, host, port, path and options, each checked against a strict
// alphabet; the allow rules match those parts and ffmpeg is given the URL
// rebuilt from them (streamURL.String). Go and ffmpeg cannot read it
// differently: the rebuilt form has one ':' before the port, no '[' but
// around an IPv6 address, no '|', '#', '%', space, control or non-ASCII
// character, and only the query options streamOptions lists.

// maxStreamURL is the longest URL a live session takes.
const maxStreamURL = 2048

// streamURL is one checked stream URL.
type streamURL struct {
	scheme     string
	user, pass string // pass "" with hasPass: an empty password
	hasPass    bool
	host       string // a lower-case name, or an IP address in canonical form
	port       int    // 0 in a rule without a port: any
	path       string // "" or "/..."
	opts       [][2]string
	listen     bool // ffmpeg listens: tcp listen=1, srt mode=listener, a udp or rtp input
}

// streamProtocols are the ffmpeg protocols each scheme of an allowed URL
// may use, and no others: a playlist or manifest cannot make ffmpeg open
// a file or another kind of URL.
var streamProtocols = map[string][]string{
	"udp": {"udp"}, "tcp": {"tcp"}, "srt": {"srt"}, "rtp": {"rtp", "udp"},
	"rtmp": {"rtmp", "tcp"}, "rtmps": {"rtmps", "tcp", "tls"},
	"rtsp": {"rtsp", "rtp", "udp", "tcp"},
	"http": {"http", "tcp"}, "https": {"https", "http", "tcp", "tls", "crypto"},
}

// defaultPorts are the ports of the schemes whose URLs may leave theirs
// out; the others need one.
var defaultPorts = map[string]int{"rtmp": 1935, "rtmps": 443, "rtsp": 554, "http": 80, "https": 443}

// streamContainers are the containers (-f) a live output of each scheme
// may have, the default first: muxers that write one stream to the one
// URL (hls and dash add segments beside an http playlist, on its host),
// never tee or another muxer that opens outputs of its own.
var streamContainers = map[string][]string{
	"udp": {"mpegts", "matroska", "nut"}, "tcp": {"mpegts", "matroska", "nut", "flv"},
	"srt": {"mpegts", "matroska", "nut"}, "rtp": {"rtp_mpegts"},
	"rtmp": {"flv"}, "rtmps": {"flv"}, "rtsp": {"rtsp"},
	"http": {"mpegts", "matroska", "nut", "flv", "hls", "dash"}, "https": {"mpegts", "matroska", "nut", "flv", "hls", "dash"},
}

// containerExt is the file extension ffmpeg writes each container to: what
// the encoder check (the file tasks' one) is run with.
var containerExt = map[string]string{
	"mpegts": ".ts", "matroska": ".mkv", "nut": ".nut", "flv": ".flv", "rtp_mpegts": ".ts", "rtsp": ".ts", "hls": ".ts", "dash": ".mp4",
}

// streamDemuxers are the only demuxers ffmpeg may use for a live input of
// each scheme (-format_whitelist): no playlist, concat or other format
// that opens more inputs. An http(s) source matched by a rule for any host
// and port may also be an HLS or DASH playlist (its segments come from
// anywhere) and redirect; others get max_redirects=0 (checkStream).
var streamDemuxers = map[string][]string{
	"udp": {"mpegts", "matroska", "nut"}, "tcp": {"mpegts", "matroska", "nut", "flv"},
	"srt": {"mpegts", "matroska", "nut"}, "rtp": {"rtp"},
	"rtmp": {"flv", "live_flv"}, "rtmps": {"flv", "live_flv"}, "rtsp": {"rtsp"},
	"http": {"mpegts", "matroska", "nut", "flv"}, "https": {"mpegts", "matroska", "nut", "flv"},
}

// urlOption is a query option ffmpeg reads from a URL: an integer in
// 0..max, one of values, or text (a passphrase, a stream id).
type urlOption struct {
	max    int
	values []string
	text   bool
	secret bool   // redacted in answers and logs
	listen string // the value that makes ffmpeg listen: only where a rule allows it
}

// streamOptions are the only query options each scheme's URLs may carry
// (none for the others): no localport, localaddr, sources or rtcpport,
// nothing that binds or sends elsewhere than the URL's host and port.
var streamOptions = map[string]map[string]urlOption{
	"udp": {"pkt_size": {max: 65507}, "buffer_size": {max: 64 << 20}, "fifo_size": {max: 1 << 20},
		"overrun_nonfatal": {values: []string{"0", "1"}}, "timeout": {max: 60_000_000}, "ttl": {max: 255}},
	"rtp": {"pkt_size": {max: 65507}, "buffer_size": {max: 64 << 20}, "ttl": {max: 255}},
	"tcp": {"listen": {values: []string{"1"}, listen: "1"}, "timeout": {max: 60_000_000},
		"listen_timeout": {max: 3_600_000}, "tcp_nodelay": {values: []string{"0", "1"}}},
	"srt": {"mode": {values: []string{"caller", "listener"}, listen: "listener"}, "latency": {max: 10_000_000},
		"passphrase": {text: true, secret: true}, "pbkeylen": {values: []string{"0", "16", "24", "32"}},
		"streamid": {text: true}},
}

// isUnreserved reports whether c is a letter, digit, '-', '.', '_' or '~'.
func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// only reports whether every byte of s is unreserved or in extra.
func only(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		if !isUnreserved(s[i]) && strings.IndexByte(extra, s[i]) < 0 {
			return false
		}
	}
	return true
}

var errUserinfo = errors.New("want user:password@ of letters, digits and -._~!$&'()*+,;= (no '@', '%', '/', '?' or '#')")

// parseStreamURL parses a live session's URL. A rule (rule true) may have
// host "*", no port (any) and no user, path or options.
func parseStreamURL(raw string, rule bool) (*streamURL, error) {
	if len(raw) > maxStreamURL {
		return nil, fmt.Errorf("%d characters; at most %d", len(raw), maxStreamURL)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f {
			return nil, fmt.Errorf("a space, control or non-ASCII character at byte %d: percent-encoding is not taken either", i)
		}
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	scheme = strings.ToLower(scheme)
	if !ok || streamProtocols[scheme] == nil {
		return nil, fmt.Errorf("want scheme://host:port with a scheme of %s", strings.Join(schemes(), ", "))
	}
	u := &streamURL{scheme: scheme}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	auth, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		ui := auth[:at]
		auth = auth[at+1:]
		u.user, u.pass, u.hasPass = strings.Cut(ui, ":")
		if rule || u.user == "" || !only(u.user, "!$&'()*+,;=") || !only(u.pass, "!$&'()*+,;=:") {
			return nil, errUserinfo
		}
	}
	if err := u.hostPort(auth, rule); err != nil {
		return nil, err
	}
	path, query, hasQuery := strings.Cut(tail, "?")
	if path != "" && !only(path, "/!$&'()*+,;=:@") {
		return nil, fmt.Errorf("path %q: want letters, digits and -._~/!$&'()*+,;=:@ only ('|', '[', ']', '#', '%%', spaces and the like are refused)", path)
	}
	u.path = path
	if hasQuery {
		if err := u.options(query); err != nil {
			return nil, err
		}
	}
	if rule && (u.path != "" && u.path != "/" || u.opts != nil) {
		return nil, fmt.Errorf("want scheme://host or scheme://host:port (host * for any), with ?listen to let sessions listen there")
	}
	return u, nil
}

// hostPort parses host[:port], [ipv6][:port] or, in a rule, *[:port].
func (u *streamURL) hostPort(s string, rule bool) error {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return fmt.Errorf("host %q: an IPv6 address without its ']'", s)
		}
		host, port = s[1:end], s[end+1:]
		ip := net.ParseIP(host)
		if ip == nil || !strings.Contains(host, ":") {
			return fmt.Errorf("host %q: '[' and ']' only around an IPv6 address", s)
		}
		if port != "" && !strings.HasPrefix(port, ":") {
			return fmt.Errorf("host %q: want [ipv6]:port", s)
		}
		u.host, port = ip.String(), strings.TrimPrefix(port, ":")
	} else {
		if strings.Count(s, ":") > 1 {
			return fmt.Errorf("host and port %q: more than one ':' (an IPv6 address goes in [ ])", s)
		}
		host, port, _ = strings.Cut(s, ":")
		if err := u.setHost(host, rule); err != nil {
			return err
		}
		if strings.HasSuffix(s, ":") {
			return fmt.Errorf("host %q: an empty port", s)
		}
	}
	if port == "" {
		return nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] < '1' || port[0] > '9' {
		return fmt.Errorf("port %q: want 1..65535", port)
	}
	u.port = n
	return nil
}

// setHost checks a host that is not in brackets: an IPv4 address, a DNS
// name or, in a rule, "*". A name whose last label starts with a digit
// ("127.1", "0x7f.1") is refused: resolvers read it as an address.
func (u *streamURL) setHost(host string, rule bool) error {
	if host == "*" && rule {
		u.host = host
		return nil
	}
	if ip := net.ParseIP(host); ip != nil {
		u.host = ip.String()
		return nil
	}
	host = strings.ToLower(host)
	labels := strings.Split(host, ".")
	last := labels[len(labels)-1]
	if host == "" || len(host) > 253 || last == "" || last[0] >= '0' && last[0] <= '9' {
		return fmt.Errorf("host %q: want a host name or an IP address", host)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' || !only(l, "") || strings.ContainsAny(l, "._~") {
			return fmt.Errorf("host %q: want a host name (letters, digits, '-' and dots) or an IP address", host)
		}
	}
	u.host = host
	return nil
}

// options checks a URL's query against streamOptions.
func (u *streamURL) options(query string) error {
	allowed := streamOptions[u.scheme]
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		opt, ok := allowed[k]
		switch {
		case !ok:
			names := make([]string, 0, len(allowed))
			for n := range allowed {
				names = append(names, n)
			}
			slices.Sort(names)
			if len(names) == 0 {
				return fmt.Errorf("option %q: %s URLs take no options here", k, u.scheme)
			}
			return fmt.Errorf("option %q is not allowed in %s URLs (allowed: %s)", k, u.scheme, strings.Join(names, ", "))
		case slices.ContainsFunc(u.opts, func(o [2]string) bool { return o[0] == k }):
			return fmt.Errorf("option %q given twice", k)
		case opt.text && (v == "" || len(v) > 512 || !only(v, ",:/")):
			return fmt.Errorf("option %q: want 1 to 512 letters, digits and -._~,:/", k)
		case opt.values != nil && !slices.Contains(opt.values, v):
			return fmt.Errorf("option %q: %q: want one of %s", k, v, strings.Join(opt.values, ", "))
		case !opt.text && opt.values == nil:
			if n, err := strconv.Atoi(v); err != nil || n < 0 || n > opt.max || v != strconv.Itoa(n) {
				return fmt.Errorf("option %q: %q: want an integer in 0..%d", k, v, opt.max)
			}
		}
		u.opts = append(u.opts, [2]string{k, v})
		u.listen = u.listen || opt.listen != "" && v == opt.listen
	}
	return nil
}

// keyAt is where the last element of an rtmp path (its stream key, after
// the app) starts: 0 when the path has no element after a first one.
func keyAt(path string) int {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 || i == len(path)-1 {
		return 0
	}
	return i + 1
}

// hasKey reports whether the scheme's URLs end in a stream key.
func hasKey(scheme string) bool { return scheme == "rtmp" || scheme == "rtmps" }

// format rebuilds the URL from its parts, with its password, secret
// options and rtmp stream key as given or as xxxxx.
func (u *streamURL) format(redact bool) string {
	var b strings.Builder
	b.WriteString(u.scheme + "://")
	if u.user != "" {
		b.WriteString(u.user)
		if u.hasPass {
			b.WriteString(":" + hide(u.pass, redact))
		}
		b.WriteString("@")
	}
	if strings.Contains(u.host, ":") {
		b.WriteString("[" + u.host + "]")
	} else {
		b.WriteString(u.host)
	}
	if u.port != 0 {
		b.WriteString(":" + strconv.Itoa(u.port))
	}
	if i := keyAt(u.path); redact && hasKey(u.scheme) && i > 0 {
		b.WriteString(u.path[:i] + "xxxxx")
	} else {
		b.WriteString(u.path)
	}
	sep := "?"
	for _, o := range u.opts {
		b.WriteString(sep + o[0] + "=" + hide(o[1], redact && streamOptions[u.scheme][o[0]].secret))
		sep = "&"
	}
	return b.String()
}

func hide(s string, redact bool) string {
	if redact {
		return "xxxxx"
	}
	return s
}

// String is the URL ffmpeg is given.
func (u *streamURL) String() string { return u.format(false) }

// Redacted is the URL with its password, secret options and rtmp stream
// key as xxxxx: what answers and the log show.
func (u *streamURL) Redacted() string { return u.format(true) }

// secrets are the URL's password, secret option values and rtmp stream
// key.
func (u *streamURL) secrets() []string {
	var s []string
	if u.pass != "" {
		s = append(s, u.pass)
	}
	if i := keyAt(u.path); hasKey(u.scheme) && i > 0 {
		s = append(s, u.path[i:])
	}
	for _, o := range u.opts {
		if streamOptions[u.scheme][o[0]].secret {
			s = append(s, o[1])
		}
	}
	return s
}

// allowRule is one entry of Config.StreamAllow: scheme://host[:port],
// host "*" for any, with ?listen to let sessions listen there.
type allowRule struct {
	streamURL
	canListen bool
}

// parseAllow reads the entries of --stream-allow.
func parseAllow(list []string) ([]allowRule, error) {
	var rules []allowRule
	for _, e := range list {
		base, q, _ := strings.Cut(e, "?")
		if q != "" && q != "listen" && q != "listen=1" {
			return nil, fmt.Errorf("--stream-allow %q: the only option a rule takes is ?listen", e)
		}
		u, err := parseStreamURL(base, true)
		if err != nil {
			return nil, fmt.Errorf("--stream-allow %q: %v", e, err)
		}
		if u.scheme == "rtsp" && (u.host != "*" || u.port != 0) {
			// ffmpeg's RTSP follows redirects and sends RTP to the ports the
			// server names: nothing else can be promised.
			return nil, fmt.Errorf("--stream-allow %q: RTSP servers redirect and choose ports: allow them only as rtsp://* (any host and port)", e)
		}
		rules = append(rules, allowRule{*u, q != ""})
	}
	return rules, nil
}

func schemes() []string {
	var s []string
	for k := range streamProtocols {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// matches reports whether r lets u in.
func (r *allowRule) matches(u *streamURL) bool {
	hostOK := r.host == "*" || r.host == u.host
	if a, b := net.ParseIP(r.host), net.ParseIP(u.host); a != nil && b != nil {
		hostOK = a.Equal(b)
	}
	return r.scheme == u.scheme && hostOK && (r.port == 0 || r.port == u.port) && (r.canListen || !u.listen)
}

func (r *allowRule) String() string {
	s := r.format(false)
	if r.canListen {
		s += "?listen"
	}
	return s
}

// checkedURL is a session's URL as ffmpeg gets it, and the rule it passed.
type checkedURL struct {
	*streamURL
	rule *allowRule
}

// allowed parses a stream URL and checks it against the rules.
func (a *api) allowed(field, raw string) (checkedURL, error) {
	u, err := parseStreamURL(raw, false)
	if err != nil {
		// What is wrong, said of the URL with its password masked: the
		// message quotes no part of the password.
		shown, masked := redactedURL(raw)
		if masked {
			if _, err = parseStreamURL(shown, false); err == nil {
				err = errSecret
			}
		}
		return checkedURL{}, fmt.Errorf("field %q: %q is not a URL vsr takes: %v", field, shown, err)
	}
	// ffmpeg reads udp and rtp on 0.0.0.0:port (rtp also port+1), from
	// any sender: a listener, whatever the URL's host.
	anySender := field == "input" && (u.scheme == "udp" || u.scheme == "rtp")
	u.listen = u.listen || anySender
	if u.port == 0 {
		if u.port = defaultPorts[u.scheme]; u.port == 0 {
			return checkedURL{}, fmt.Errorf("field %q: %s is not a URL vsr takes: want scheme://host:port (a %s URL needs its port)", field, u.Redacted(), u.scheme)
		}
	}
	for i := range a.allow {
		if a.allow[i].matches(u) {
			return checkedURL{u, &a.allow[i]}, nil
		}
	}
	if len(a.allow) == 0 {
		return checkedURL{}, fmt.Errorf("field %q: %s is not allowed: this server allows no stream URLs (start it with --stream-allow scheme://host)", field, u.Redacted())
	}
	what := ""
	switch {
	case anySender:
		what = fmt.Sprintf(" (a %s input listens on its port, taking packets from any sender: a rule needs ?listen)", u.scheme)
	case u.listen:
		what = " (to listen, a rule needs ?listen)"
	}
	return checkedURL{}, fmt.Errorf("field %q: %s is not allowed%s (--stream-allow lets in %s)", field, u.Redacted(), what, a.allowList())
}

func (a *api) allowList() string {
	var l []string
	for _, r := range a.allow {
		l = append(l, r.String())
	}
	return strings.Join(l, ", ")
}

// errSecret is what is wrong with a URL that parses once its secrets are
// masked: the message cannot quote them.
var errSecret = errors.New("its password, a secret option's value or its stream key has a character vsr does not take (letters, digits and -._~ are always taken)")

// secretName reports whether a URL option of this name holds a secret
// (passphrase, key, token, ...), in a URL that did not parse.
func secretName(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "pass") || strings.Contains(k, "key") || strings.Contains(k, "token") || strings.Contains(k, "secret")
}

// redactedURL is a URL that did not parse, for an answer or the log, with
// xxxxx for whatever lies between "://user:" and the last '@' (a password,
// and more when the URL is odd), for the values of the options whose
// names secretName lists, and for an rtmp URL's stream key (the last
// element of its path); masked says whether anything was.
func redactedURL(raw string) (shown string, masked bool) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw, false
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if user, pass, _ := strings.Cut(rest[:at], ":"); pass != "" {
			rest, masked = user+":xxxxx"+rest[at:], true
		}
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if slash := strings.IndexByte(rest, '/'); slash >= 0 && hasKey(strings.ToLower(scheme)) {
		if i := keyAt(rest[slash:]); i > 0 {
			rest, masked = rest[:slash+i]+"xxxxx", true
		}
	}
	if hasQuery {
		opts := strings.Split(query, "&")
		for i, kv := range opts {
			if k, v, _ := strings.Cut(kv, "="); v != "" && secretName(k) {
				opts[i], masked = k+"=xxxxx", true
			}
		}
		rest += "?" + strings.Join(opts, "&")
	}
	return scheme + "://" + rest, masked
}
