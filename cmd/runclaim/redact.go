package main

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a password in printed errors.
const redacted = "xxxxx"

// redact returns msg with the password fields of connection strings
// replaced: the password in a URL's user info ("postgres://u:PASSWORD@h"),
// the value of password= and sslpassword= (quoted or not, in key=value form
// or a URL query), and the connection string of DATABASE_URL wherever it
// appears whole with a password that those fields do not delimit. pgx puts
// the user, host and database in its errors but not the password; this is
// the second line of defence, for parse errors and anything a driver may
// add later.
//
// It replaces fields, not every occurrence of the password's text: a
// password "stgr" must not turn the source "my stgr job" into
// "my xxxxx job", nor a password equal to the user name hide the user in
// every message.
func (c *cli) redact(msg string) string {
	if c.dsn != "" && strings.Contains(msg, c.dsn) {
		if pws := passwordsIn(c.dsn); len(pws) > 0 {
			safe := redactFields(c.dsn)
			for _, p := range passwordsIn(safe) {
				if p != redacted && p != "'"+redacted+"'" {
					safe = redacted // a password the fields do not delimit
					break
				}
			}
			msg = strings.ReplaceAll(msg, c.dsn, safe)
		}
	}
	return redactFields(msg)
}

// urlScheme finds the start of a URL: its scheme and "://".
var urlScheme = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://`)

// passwordField finds password=... and sslpassword=... as a key=value
// connection string or a URL query writes them: the value is quoted with
// single quotes (and backslash escapes), or runs to a space or a quote.
var passwordField = regexp.MustCompile(`(?i)\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'"` + "`" + `]+)`)

// redactFields replaces the password fields in s: URL user info and
// password= values.
func redactFields(s string) string {
	var b strings.Builder
	last := 0
	for _, loc := range urlScheme.FindAllStringIndex(s, -1) {
		if loc[0] < last {
			continue
		}
		// The URL runs to a space or a quote; its user info ends at its
		// last "@" (a host cannot hold one; a password can).
		rest := s[loc[1]:]
		end := strings.IndexAny(rest, " \t\n\"'`<>")
		if end < 0 {
			end = len(rest)
		}
		at := strings.LastIndexByte(rest[:end], '@')
		if at < 0 {
			continue
		}
		colon := strings.IndexByte(rest[:at], ':')
		if colon < 0 {
			continue // a user without a password
		}
		b.WriteString(s[last : loc[1]+colon+1])
		b.WriteString(redacted)
		last = loc[1] + at
	}
	b.WriteString(s[last:])
	return passwordField.ReplaceAllString(b.String(), "${1}"+redacted)
}

// keywordPassword finds password=... and sslpassword=... in a key=value
// connection string, quoted or not.
var keywordPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// passwordsIn extracts what may be passwords from a connection string in
// URL or key=value form, even one that does not parse, so that they can be
// redacted from error messages.
func passwordsIn(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
		}
	}
	// The userinfo by hand, for URLs that url.Parse rejects.
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if end := strings.IndexAny(rest, "/?"); end >= 0 {
			rest = rest[:end]
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			userinfo := rest[:at]
			if colon := strings.IndexByte(userinfo, ':'); colon >= 0 {
				p := userinfo[colon+1:]
				out = append(out, p)
				if un, err := url.PathUnescape(p); err == nil {
					out = append(out, un)
				}
			}
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		p := m[1]
		out = append(out, p)
		if strings.HasPrefix(p, "'") && strings.HasSuffix(p, "'") && len(p) >= 2 {
			out = append(out, p[1:len(p)-1])
		}
		if un, err := url.QueryUnescape(strings.TrimRight(p, "&")); err == nil {
			out = append(out, un)
		}
		if amp := strings.IndexByte(p, '&'); amp >= 0 {
			out = append(out, p[:amp])
		}
	}
	return out
}
