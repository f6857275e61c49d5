package runclaimui

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	"github.com/runclaim/runclaim"
)

//go:embed templates/*.tmpl static/*
var files embed.FS

// An Option configures the console.
type Option func(*config) error

type config struct {
	actions  bool
	identity func(*http.Request) (string, error)
	logger   *slog.Logger
	maxAge   time.Duration
	csrfKey  []byte
}

// WithActions turns the operator's actions on: pause, resume, trigger,
// release, end a cooldown, set a limit, and bulk pause and resume. Without
// it the console is read-only: it shows no action, and refuses every POST.
// Actions need WithIdentity.
func WithActions() Option {
	return func(c *config) error { c.actions = true; return nil }
}

// WithIdentity sets the function that names who makes a request, as the
// embedding service authenticated it. An action whose request it names no
// one for (an error, or an empty name) is refused with 403 Forbidden. The
// name is what the log and a pause's note record, and what the CSRF token
// is bound to.
func WithIdentity(identity func(r *http.Request) (string, error)) Option {
	return func(c *config) error {
		if identity == nil {
			return errors.New("runclaimui: WithIdentity: nil function")
		}
		c.identity = identity
		return nil
	}
}

// WithLogger sets the logger of the actions (who did what to which
// source) and of the errors the pages met; slog.Default() if not given.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("runclaimui: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMaxAge marks a source overdue when no run of it succeeded within d,
// as runclaim check --max-age does. Without it no source is overdue.
func WithMaxAge(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("runclaimui: WithMaxAge(%v): want a positive duration", d)
		}
		c.maxAge = d
		return nil
	}
}

// WithCSRFKey sets the key that signs the CSRF tokens, at least 32 bytes.
// Without it each handler draws a random key when New makes it, which is
// right for one instance; several instances behind one address need the
// same key, or a form served by one is refused by another.
func WithCSRFKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < 32 {
			return fmt.Errorf("runclaimui: WithCSRFKey: %d bytes, want at least 32", len(key))
		}
		c.csrfKey = bytes.Clone(key)
		return nil
	}
}

// console is the handler New returns.
type console struct {
	store  *runclaim.PostgresStore
	cfg    config
	mux    *http.ServeMux
	pages  map[string]*template.Template
	origin *http.CrossOriginProtection
}

// New returns the console's handler over store. Mount it under any prefix
// with http.StripPrefix, behind the service's own authentication; see the
// package documentation for its routes.
func New(store *runclaim.PostgresStore, opts ...Option) (http.Handler, error) {
	if store == nil || reflect.ValueOf(store).IsNil() {
		return nil, errors.New("runclaimui: New: nil store")
	}
	c := &console{store: store, mux: http.NewServeMux(), origin: http.NewCrossOriginProtection()}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("runclaimui: New: nil Option")
		}
		if err := o(&c.cfg); err != nil {
			return nil, err
		}
	}
	if c.cfg.actions && c.cfg.identity == nil {
		return nil, errors.New("runclaimui: New: WithActions needs WithIdentity, which names who does each action")
	}
	if c.cfg.logger == nil {
		c.cfg.logger = slog.Default()
	}
	if c.cfg.csrfKey == nil {
		c.cfg.csrfKey = make([]byte, 32)
		if _, err := rand.Read(c.cfg.csrfKey); err != nil {
			return nil, fmt.Errorf("runclaimui: New: CSRF key: %w", err)
		}
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	c.mux.HandleFunc("GET /{$}", c.sourcesPage)
	c.mux.HandleFunc("GET /sources/{source}", c.sourcePage)
	c.mux.HandleFunc("GET /keys", c.keysPage)
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	post := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		c.mux.Handle("POST "+pattern, c.origin.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.action(w, r, h)
		})))
	}
	post("/sources/{source}/{action}", c.sourceAction)
	post("/keys/{key}/{action}", c.keyAction)
	post("/bulk", c.bulkAction)
	return c, nil
}

// ServeHTTP serves the pages with headers that allow no script, no
// framing and no caching.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// csrfToken is the token of identity's forms: an HMAC of the identity
// under the handler's key.
func (c *console) csrfToken(identity string) string {
	m := hmac.New(sha256.New, c.cfg.csrfKey)
	m.Write([]byte("runclaimui csrf\x00"))
	m.Write([]byte(identity))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// who names the request's maker for the pages: empty when the console is
// read-only or the identity function names no one.
func (c *console) who(r *http.Request) string {
	if !c.cfg.actions {
		return ""
	}
	id, err := c.cfg.identity(r)
	if err != nil {
		return ""
	}
	return id
}
