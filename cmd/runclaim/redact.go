package main

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// redacted replaces a secret in printed errors.
const redacted = "xxxxx"

// minSecretLen is the shortest secret redact replaces: replacing every "a"
// of a message for a one-letter password would make it unreadable and hide
// nothing.
const minSecretLen = 3

// redact returns msg with every known secret (the DSN, passwords from it,
// from PGPASSWORD and from ~/.pgpass) replaced. pgx puts the user, host and
// database in its errors but not the password; this is the second line of
// defence, for parse errors and anything a driver may add later.
func (c *cli) redact(msg string) string {
	secrets := make([]string, 0, len(c.secrets))
	for _, s := range c.secrets {
		if len(s) >= minSecretLen {
			secrets = append(secrets, s)
		}
	}
	// Longest first, so that the DSN goes before the password inside it.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, redacted)
		if esc := url.QueryEscape(s); esc != s {
			msg = strings.ReplaceAll(msg, esc, redacted)
		}
		if esc := url.PathEscape(s); esc != s {
			msg = strings.ReplaceAll(msg, esc, redacted)
		}
	}
	return msg
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
