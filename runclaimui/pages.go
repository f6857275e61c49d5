package runclaimui

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runclaim/runclaim"
)

// pageSize is how many sources the sources page lists at once.
const pageSize = 200

// historyLimits are the lengths of history a source's page offers.
var historyLimits = []int{50, 200, 1000}

// page is what every template gets.
type page struct {
	Title    string
	Base     string // the mount point, relative to the page: "./" or "../"
	Actions  bool   // actions are on and the request names someone
	Identity string
	CSRF     string
	Have     int // the schema version in the database
	Want     int // the version this release needs
	Now      time.Time
	Data     any
}

func (c *console) newPage(ctx context.Context, r *http.Request, title, base string) *page {
	p := &page{Title: title, Base: base}
	if who := c.who(r); who != "" {
		p.Actions, p.Identity, p.CSRF = true, who, c.csrfToken(who)
	}
	var err error
	if p.Have, p.Want, err = c.store.SchemaVersion(ctx); err != nil {
		c.cfg.logger.Warn("runclaimui: schema version", "err", err)
	}
	return p
}

// render writes the page named with p, or an error page if it cannot.
func (c *console) render(w http.ResponseWriter, status int, name string, p *page) {
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.cfg.logger.Error("runclaimui: render", "page", name, "err", err)
		http.Error(w, "runclaimui: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail renders an error page with err's text.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, base string, err error) {
	if status >= 500 {
		c.cfg.logger.Error("runclaimui: request failed", "path", r.URL.Path, "err", err)
	}
	p := &page{Title: http.StatusText(status), Base: base, Data: err.Error()}
	c.render(w, status, "error", p)
}

// sourceRow is one source on the sources page.
type sourceRow struct {
	Name     string
	Href     string
	Running  *runclaim.RunRecord
	LeaseIn  time.Duration // until the running run's lease ends
	Last     *runclaim.RunRecord
	Success  *runclaim.RunRecord
	Control  *runclaim.SourceControl
	Overdue  bool
	Failing  bool
	Replaced bool
}

// sourcesData is the sources page.
type sourcesData struct {
	Rows                              []sourceRow
	Total, Shown                      int
	Running, Paused, Overdue, Failing int
	Cooling                           []runclaim.KeyState
	Query, Show                       string
	Page, Pages                       int
	Prev, Next                        string
	MaxAge                            time.Duration
	Filters                           []string
}

var showFilters = []string{"all", "running", "paused", "overdue", "failing"}

func (c *console) sourcesPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := c.newPage(ctx, r, "Sources", "./")
	states, err := c.store.SourceStates(ctx)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "./", err)
		return
	}
	controls, now, err := c.store.Controls(ctx, "")
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "./", err)
		return
	}
	keys, _, err := c.store.Keys(ctx)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "./", err)
		return
	}
	// The running runs with their ticks, which SourceStates does not read.
	ticks := map[int64]time.Time{}
	if _, err := c.store.RunningFunc(ctx, "", func(run runclaim.RunRecord, _ time.Time) error {
		if !run.Tick.IsZero() {
			ticks[run.ID] = run.Tick
		}
		return nil
	}); err != nil {
		c.fail(w, r, http.StatusInternalServerError, "./", err)
		return
	}
	p.Now = now
	q := r.URL.Query()
	d := &sourcesData{Query: q.Get("q"), Show: q.Get("show"), MaxAge: c.cfg.maxAge, Filters: showFilters}
	if !slices.Contains(showFilters, d.Show) {
		d.Show = "all"
	}
	byName := make(map[string]*runclaim.SourceControl, len(controls))
	for i := range controls {
		byName[controls[i].Source] = &controls[i]
	}
	// Sources paused or triggered before they ever ran are sources too.
	seen := make(map[string]bool, len(states))
	for _, s := range states {
		seen[s.Source] = true
	}
	for _, ctl := range controls {
		if !seen[ctl.Source] {
			states = append(states, runclaim.SourceState{Source: ctl.Source, CheckedAt: now})
		}
	}
	slices.SortFunc(states, func(a, b runclaim.SourceState) int { return strings.Compare(a.Source, b.Source) })
	all := make([]sourceRow, 0, len(states))
	for _, s := range states {
		row := sourceRow{
			Name:    s.Source,
			Href:    "sources/" + url.PathEscape(s.Source),
			Running: s.Running(),
			Last:    s.LastFinished,
			Success: s.LastSuccess,
			Control: byName[s.Source],
			Failing: s.Failing(),
		}
		if row.Running != nil {
			row.LeaseIn = row.Running.LeaseUntil.Sub(s.CheckedAt)
			if tick, ok := ticks[row.Running.ID]; ok {
				run := *row.Running
				run.Tick = tick
				row.Running = &run
			}
		}
		if c.cfg.maxAge > 0 && s.Latest != nil {
			row.Overdue = s.Overdue(c.cfg.maxAge)
		}
		if row.Running != nil {
			d.Running++
		}
		if row.Control != nil && row.Control.Paused {
			d.Paused++
		}
		if row.Overdue {
			d.Overdue++
		}
		if row.Failing {
			d.Failing++
		}
		all = append(all, row)
	}
	d.Total = len(all)
	shown := all[:0:0]
	for _, row := range all {
		if d.Query != "" && !strings.Contains(row.Name, d.Query) {
			continue
		}
		switch d.Show {
		case "running":
			if row.Running == nil {
				continue
			}
		case "paused":
			if row.Control == nil || !row.Control.Paused {
				continue
			}
		case "overdue":
			if !row.Overdue {
				continue
			}
		case "failing":
			if !row.Failing {
				continue
			}
		}
		shown = append(shown, row)
	}
	d.Shown = len(shown)
	d.Pages = max(1, (len(shown)+pageSize-1)/pageSize)
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = min(max(d.Page, 1), d.Pages)
	d.Rows = shown[(d.Page-1)*pageSize : min(len(shown), d.Page*pageSize)]
	link := func(n int) string {
		v := url.Values{}
		if d.Query != "" {
			v.Set("q", d.Query)
		}
		if d.Show != "all" {
			v.Set("show", d.Show)
		}
		v.Set("page", strconv.Itoa(n))
		return "?" + v.Encode()
	}
	if d.Page > 1 {
		d.Prev = link(d.Page - 1)
	}
	if d.Page < d.Pages {
		d.Next = link(d.Page + 1)
	}
	for _, k := range keys {
		if !k.CoolingUntil.IsZero() && k.CoolingUntil.After(now) {
			d.Cooling = append(d.Cooling, k)
		}
	}
	p.Data = d
	c.render(w, http.StatusOK, "sources", p)
}

// historyRow is one run on a source's page.
type historyRow struct {
	runclaim.RunRecord
	Duration time.Duration // to the finish, or to now while running
	Lateness time.Duration // from the tick to the start; 0 without a tick
	Live     bool          // running with a live lease
}

// sourceData is a source's page.
type sourceData struct {
	Name    string
	Escaped string // the name, path-escaped, for the action URLs
	Control *runclaim.SourceControl
	Runs    []historyRow
	Limit   int
	Limits  []int
	More    bool
}

func (c *console) sourcePage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("source")
	if err := runclaim.ValidateSource(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, "../", err)
		return
	}
	p := c.newPage(ctx, r, name, "../")
	d := &sourceData{Name: name, Escaped: url.PathEscape(name), Limit: historyLimits[0], Limits: historyLimits}
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && slices.Contains(historyLimits, n) {
		d.Limit = n
	}
	runs, err := c.store.History(ctx, name, d.Limit+1)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "../", err)
		return
	}
	controls, now, err := c.store.Controls(ctx, name)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "../", err)
		return
	}
	p.Now = now
	if len(controls) > 0 {
		d.Control = &controls[0]
	}
	if len(runs) > d.Limit {
		runs, d.More = runs[:d.Limit], true
	}
	for _, run := range runs {
		row := historyRow{RunRecord: run}
		end := run.FinishedAt
		if run.Status == runclaim.StatusRunning {
			end = now
			row.Live = run.LeaseUntil.After(now)
		}
		row.Duration = end.Sub(run.StartedAt)
		if !run.Tick.IsZero() {
			row.Lateness = run.StartedAt.Sub(run.Tick)
		}
		d.Runs = append(d.Runs, row)
	}
	p.Data = d
	c.render(w, http.StatusOK, "source", p)
}

// keyRow is one key on the keys page.
type keyRow struct {
	runclaim.KeyState
	Escaped string
	Cooling bool
	NextAt  time.Time // when MinGap lets the next start, if later than now
}

func (c *console) keysPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := c.newPage(ctx, r, "Keys", "./")
	keys, now, err := c.store.Keys(ctx)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, "./", err)
		return
	}
	p.Now = now
	rows := make([]keyRow, 0, len(keys))
	for _, k := range keys {
		row := keyRow{KeyState: k, Escaped: url.PathEscape(k.Key), Cooling: k.CoolingUntil.After(now)}
		if k.Limit.MinGap > 0 && !k.LastStart.IsZero() {
			if next := k.LastStart.Add(k.Limit.MinGap); next.After(now) {
				row.NextAt = next
			}
		}
		rows = append(rows, row)
	}
	p.Data = rows
	c.render(w, http.StatusOK, "keys", p)
}

// parsePages parses each page's template with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"clean":     clean,
		"limitText": limitText,
		"line":      firstLine,
		"ago":       ago,
		"dur":       duration,
		"at":        at,
		"pathq":     url.PathEscape,
		"isZero":    func(t time.Time) bool { return t.IsZero() },
		"statusOf":  func(s runclaim.Status) string { return string(s) },
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"sources", "source", "keys", "confirm", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.tmpl", "templates/"+name+".tmpl")
		if err != nil {
			return nil, fmt.Errorf("runclaimui: templates: %w", err)
		}
		pages[name] = t
	}
	return pages, nil
}
