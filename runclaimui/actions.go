package runclaimui

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
)

// maxForm bounds the body of an action's POST (a bulk action names up to
// a page of sources).
const maxForm = 1 << 20

// errBadForm marks an action's input that is refused: 400, not 500.
var errBadForm = errors.New("runclaimui: bad request")

// act is one action, built from its form: what the confirmation page
// says, how to do it, and where to go afterwards.
type act struct {
	Name    string   // pause, resume, trigger, release, end-cooldown, limit
	Target  string   // the source or key, or "3 sources"
	Detail  []string // the lines the confirmation shows
	Sources []string // of a bulk action
	Base    string   // the mount point, relative to the action's URL
	Back    string   // where the browser goes afterwards, relative to the action's URL
	do      func(ctx context.Context) error
}

// confirmData is the confirmation page.
type confirmData struct {
	Act    *act
	Fields [][2]string // the form's fields, sent again with confirm=yes
}

// action runs an action's checks, in order: actions on, an identity, a
// bounded form with the identity's CSRF token; then build makes the
// action, which is confirmed on a page of its own before it is done.
func (c *console) action(w http.ResponseWriter, r *http.Request, build func(http.ResponseWriter, *http.Request)) {
	if !c.cfg.actions {
		http.Error(w, "runclaimui: this console is read-only", http.StatusForbidden)
		return
	}
	who, err := c.cfg.identity(r)
	if err != nil || who == "" {
		c.cfg.logger.Warn("runclaimui: action refused: no identity", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		http.Error(w, "runclaimui: no identity for this request", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "runclaimui: unreadable form", http.StatusBadRequest)
		return
	}
	token := r.PostForm.Get("csrf")
	if token == "" || !hmac.Equal([]byte(token), []byte(c.csrfToken(who))) {
		c.cfg.logger.Warn("runclaimui: action refused: bad CSRF token", "path", r.URL.Path, "by", who, "remote", r.RemoteAddr)
		http.Error(w, "runclaimui: the form's CSRF token is missing or wrong; reload the page", http.StatusForbidden)
		return
	}
	build(w, r)
}

// finish confirms a, or does it: the confirmation page unless the form
// says confirm=yes; then the action, logged with who did it, and a
// redirect to a.Back.
func (c *console) finish(w http.ResponseWriter, r *http.Request, a *act, err error) {
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, errBadForm) {
			status = http.StatusBadRequest
		}
		c.fail(w, r, status, a.Base, err)
		return
	}
	who, _ := c.cfg.identity(r)
	if r.PostForm.Get("confirm") != "yes" {
		p := c.newPage(r.Context(), r, "Confirm: "+a.Name, a.Base)
		d := &confirmData{Act: a}
		for k, vs := range r.PostForm {
			if k == "csrf" || k == "confirm" {
				continue
			}
			for _, v := range vs {
				d.Fields = append(d.Fields, [2]string{k, v})
			}
		}
		p.Data = d
		c.render(w, http.StatusOK, "confirm", p)
		return
	}
	if err := a.do(r.Context()); err != nil {
		c.cfg.logger.Warn("runclaimui: action failed", "action", a.Name, "target", a.Target, "sources", a.Sources, "by", who, "remote", r.RemoteAddr, "err", err)
		status := http.StatusConflict
		if r.Context().Err() != nil {
			status = http.StatusServiceUnavailable
		}
		c.fail(w, r, status, a.Base, err)
		return
	}
	c.cfg.logger.Info("runclaimui: action", "action", a.Name, "target", a.Target, "sources", a.Sources, "detail", a.Detail, "by", who, "remote", r.RemoteAddr)
	// Relative to the action's URL, as the browser sent it: the handler
	// does not know the prefix it is mounted under (http.Redirect would
	// resolve a.Back against the path with the prefix stripped).
	w.Header().Set("Location", a.Back)
	w.WriteHeader(http.StatusSeeOther)
}

// sourceAction is POST /sources/{source}/{action}.
func (c *console) sourceAction(w http.ResponseWriter, r *http.Request) {
	source := r.PathValue("source")
	esc := url.PathEscape(source)
	a := &act{Name: r.PathValue("action"), Target: source, Base: "../../", Back: "../" + esc}
	if r.PostForm.Get("back") == "list" {
		a.Back = "../../"
	}
	if err := runclaim.ValidateSource(source); err != nil {
		c.finish(w, r, a, fmt.Errorf("%w: %w", errBadForm, err))
		return
	}
	who, _ := c.cfg.identity(r)
	var err error
	switch a.Name {
	case "pause":
		var p pauseArgs
		if p, err = parsePause(r, who); err == nil {
			a.Detail = p.detail()
			a.do = func(ctx context.Context) error { return c.pause(ctx, source, p) }
		}
	case "resume":
		a.do = func(ctx context.Context) error { return c.store.Resume(ctx, source) }
	case "trigger":
		a.Detail = []string{"The source's next claim runs even if its minimum interval or its tick says not yet."}
		a.do = func(ctx context.Context) error { return c.store.Trigger(ctx, source) }
	case "release":
		id, perr := strconv.ParseInt(r.PostForm.Get("id"), 10, 64)
		if perr != nil || id <= 0 {
			err = fmt.Errorf("%w: release: want the running run's ID (form field id)", errBadForm)
			break
		}
		a.Detail = []string{fmt.Sprintf("Run %d is released: its holder loses its lease at its next heartbeat, and the source may run again.", id)}
		a.do = func(ctx context.Context) error {
			_, err := c.store.Release(ctx, id, source)
			return err
		}
	default:
		err = fmt.Errorf("%w: no action %q for a source", errBadForm, a.Name)
	}
	c.finish(w, r, a, err)
}

// keyAction is POST /keys/{key}/{action}.
func (c *console) keyAction(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	a := &act{Name: r.PathValue("action"), Target: "key " + key, Base: "../../", Back: "../../keys"}
	var err error
	switch a.Name {
	case "end-cooldown":
		a.do = func(ctx context.Context) error { return c.store.EndCooldown(ctx, key) }
	case "limit":
		var l runclaim.Limit
		if l, err = parseLimit(r); err == nil {
			a.Detail = []string{limitText(l)}
			a.do = func(ctx context.Context) error { return c.store.SetLimit(ctx, key, l) }
		}
	default:
		err = fmt.Errorf("%w: no action %q for a key", errBadForm, a.Name)
	}
	c.finish(w, r, a, err)
}

// bulkAction is POST /bulk: pause or resume the sources the form names.
func (c *console) bulkAction(w http.ResponseWriter, r *http.Request) {
	sources := r.PostForm["source"]
	a := &act{Name: r.PostForm.Get("action"), Sources: sources, Base: "./", Back: "./"}
	a.Target = fmt.Sprintf("%d sources", len(sources))
	var err error
	switch {
	case len(sources) == 0:
		err = fmt.Errorf("%w: select at least one source", errBadForm)
	case len(sources) > pageSize:
		err = fmt.Errorf("%w: %d sources selected; at most %d at once", errBadForm, len(sources), pageSize)
	}
	for _, s := range sources {
		if err != nil {
			break
		}
		if verr := runclaim.ValidateSource(s); verr != nil {
			err = fmt.Errorf("%w: %w", errBadForm, verr)
		}
	}
	who, _ := c.cfg.identity(r)
	if err == nil {
		switch a.Name {
		case "pause":
			var p pauseArgs
			if p, err = parsePause(r, who); err == nil {
				a.Detail = p.detail()
				a.do = func(ctx context.Context) error {
					return eachSource(ctx, sources, func(s string) error { return c.pause(ctx, s, p) })
				}
			}
		case "resume":
			a.do = func(ctx context.Context) error {
				return eachSource(ctx, sources, func(s string) error { return c.store.Resume(ctx, s) })
			}
		default:
			err = fmt.Errorf("%w: no bulk action %q (pause or resume)", errBadForm, a.Name)
		}
	}
	c.finish(w, r, a, err)
}

// eachSource calls fn for each source, and joins what failed.
func eachSource(ctx context.Context, sources []string, fn func(string) error) error {
	var errs []error
	for _, s := range sources {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := fn(s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// pauseArgs is a pause's form: how long (0: until resumed) and the note,
// which records who made it.
type pauseArgs struct {
	For  time.Duration
	Note string
}

func (p pauseArgs) detail() []string {
	d := []string{"Until resumed."}
	if p.For > 0 {
		d[0] = "For " + duration(p.For) + ", by the database's clock."
	}
	return append(d, "Note: "+p.Note)
}

// parsePause reads the form fields for (a duration, such as 90m or 2h;
// empty for until resumed) and note.
func parsePause(r *http.Request, who string) (pauseArgs, error) {
	var p pauseArgs
	if s := strings.TrimSpace(r.PostForm.Get("for")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > runclaim.MaxLease {
			return p, fmt.Errorf("%w: pause for %q: want a positive duration such as 90m or 2h, up to a year", errBadForm, s)
		}
		p.For = d
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	if !utf8.ValidString(note) || strings.ContainsRune(note, 0) {
		return p, fmt.Errorf("%w: the note is not UTF-8 text", errBadForm)
	}
	p.Note = "[by " + who + "]"
	if note != "" {
		p.Note += " " + note
	}
	if n := utf8.RuneCountInString(p.Note); n > runclaim.MaxPauseNoteLen {
		return p, fmt.Errorf("%w: the note and who made it are %d characters; at most %d", errBadForm, n, runclaim.MaxPauseNoteLen)
	}
	return p, nil
}

// pause pauses source as p says, its end measured from the database's
// clock.
func (c *console) pause(ctx context.Context, source string, p pauseArgs) error {
	var until time.Time
	if p.For > 0 {
		_, now, err := c.store.Controls(ctx, source)
		if err != nil {
			return err
		}
		until = now.Add(p.For)
	}
	return c.store.Pause(ctx, source, until, p.Note)
}

// parseLimit reads the form fields max_running, max_starts, per and
// min_gap; an empty field is 0.
func parseLimit(r *http.Request) (runclaim.Limit, error) {
	var l runclaim.Limit
	num := func(name string, dst *int) error {
		s := strings.TrimSpace(r.PostForm.Get(name))
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: %s %q: want a whole number, 0 or more", errBadForm, name, s)
		}
		*dst = n
		return nil
	}
	dur := func(name string, dst *time.Duration) error {
		s := strings.TrimSpace(r.PostForm.Get(name))
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: %s %q: want a duration such as 1h or 30s", errBadForm, name, s)
		}
		*dst = d
		return nil
	}
	if err := errors.Join(num("max_running", &l.MaxRunning), num("max_starts", &l.MaxStarts), dur("per", &l.Per), dur("min_gap", &l.MinGap)); err != nil {
		return l, err
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("%w: %w", errBadForm, err)
	}
	return l, nil
}

// limitText says what l allows.
func limitText(l runclaim.Limit) string {
	var parts []string
	if l.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("at most %d running", l.MaxRunning))
	}
	if l.MaxStarts > 0 {
		parts = append(parts, fmt.Sprintf("at most %d starts per %s", l.MaxStarts, duration(l.Per)))
	}
	if l.MinGap > 0 {
		parts = append(parts, "at least "+duration(l.MinGap)+" between starts")
	}
	if len(parts) == 0 {
		return "no bound"
	}
	return strings.Join(parts, ", ")
}
