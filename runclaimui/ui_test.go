package runclaimui_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/internal/pgtest"
	"github.com/runclaim/runclaim/runclaimui"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// hostile is an error text meant to break out of the page: markup, a
// script, an attribute, ANSI colours, a bidirectional override, control
// characters.
const hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>\" onmouseover=\"alert(3)\n\x1b[31mRED\x1b[0m \u202egnp.exe\a\x00"

// fixture is a migrated store with a source of each kind the pages show.
type fixture struct {
	store *runclaim.PostgresStore
	db    *pgtest.DB
	run   *runclaim.Run // the running run of "running"
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	store, err := runclaim.NewPostgresStore(db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := runclaim.New(store, runclaim.WithOwner("replica-a"), runclaim.WithLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	finish := func(source string, jobErr error, opts ...runclaim.ClaimOption) {
		run, err := c.Claim(ctx, source, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, jobErr); err != nil {
			t.Fatal(err)
		}
	}
	finish("nightly-billing", nil)
	finish("scraper/avito", errors.New(hostile))
	finish("ticked", nil, runclaim.ForTick(time.Now().Add(-3*time.Second).Truncate(time.Second)))
	run, err := c.Claim(ctx, "running", runclaim.WithKeys("api"), runclaim.ForTick(time.Date(2026, 12, 7, 9, 30, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, "paused-source", time.Time{}, "<b>maintenance</b> by ops"); err != nil {
		t.Fatal(err)
	}
	if err := store.SetLimit(ctx, "api", runclaim.Limit{MaxRunning: 2, MinGap: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := store.Cooldown(ctx, "api", time.Now().Add(time.Hour), "429 from upstream \x1b[1m"); err != nil {
		t.Fatal(err)
	}
	return &fixture{store: store, db: db, run: run}
}

// logBuffer is a logger's output that tests read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve mounts the console under /ops/ of a test server.
func serve(t testing.TB, store *runclaim.PostgresStore, opts ...runclaimui.Option) *httptest.Server {
	t.Helper()
	ui, err := runclaimui.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", ui))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// client follows no redirect, so that tests see the 303 of an action.
func client(t testing.TB) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func post(t testing.TB, c *http.Client, u string, form url.Values, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// handlerAttr matches a tag with an event handler attribute: text that
// html/template escaped cannot form one, since its < is &lt;.
var handlerAttr = regexp.MustCompile(`<[a-z][^<>]*\son[a-z]+\s*=`)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// asUser is an identity function that names whoever the X-Test-User
// header says, as a service's authentication would.
func asUser(r *http.Request) (string, error) {
	if u := r.Header.Get("X-Test-User"); u != "" {
		return u, nil
	}
	return "alice", nil
}

func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	if _, err := runclaimui.New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	var typedNil *runclaim.PostgresStore
	if _, err := runclaimui.New(typedNil); err == nil {
		t.Error("New(typed nil): no error")
	}
	store, err := runclaim.NewPostgresStore(nilPool{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]runclaimui.Option{
		"actions without identity": {runclaimui.WithActions()},
		"nil option":               {nil},
		"nil identity":             {runclaimui.WithIdentity(nil)},
		"nil logger":               {runclaimui.WithLogger(nil)},
		"zero max age":             {runclaimui.WithMaxAge(0)},
		"negative max age":         {runclaimui.WithMaxAge(-time.Second)},
		"short CSRF key":           {runclaimui.WithCSRFKey([]byte("short"))},
	} {
		if _, err := runclaimui.New(store, opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.store, runclaimui.WithMaxAge(time.Hour))
	c := client(t)
	for _, path := range []string{"/ops/", "/ops/sources/" + url.PathEscape("scraper/avito"), "/ops/sources/running", "/ops/keys"} {
		code, body := get(t, c, srv.URL+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, `method="post"`) || strings.Contains(body, "csrf") {
			t.Errorf("GET %s: a read-only page shows a form that posts", path)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("GET %s: the page does not say it is read-only", path)
		}
	}
	code, body, _ := post(t, c, srv.URL+"/ops/sources/running/pause", url.Values{"confirm": {"yes"}})
	if code != http.StatusForbidden {
		t.Errorf("POST pause to a read-only console: %d %s, want 403", code, body)
	}
	if ctl, _, err := f.store.Controls(t.Context(), "running"); err != nil || len(ctl) != 0 {
		t.Errorf("the read-only console's POST changed the source: %v, %v", ctl, err)
	}
}

func TestPagesShowTheFleet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.store, runclaimui.WithMaxAge(time.Hour))
	c := client(t)
	_, list := get(t, c, srv.URL+"/ops/")
	for _, want := range []string{
		"nightly-billing", "scraper/avito", `href="sources/scraper%2Favito"`, "paused-source", "replica-a",
		"&lt;b&gt;maintenance&lt;/b&gt; by ops", // the pause's note, escaped
		"Keys cooling down", "429 from upstream \\x1b[1m",
		"5 sources", "1 running", "1 paused", "1 failing",
		"schema version 13",
		"2026-12-07 09:30:00Z", // the running run's tick
	} {
		if !strings.Contains(list, want) {
			t.Errorf("the sources page lacks %q", want)
		}
	}
	_, running := get(t, c, srv.URL+"/ops/?show=running")
	if !strings.Contains(running, ">running<") || strings.Contains(running, "nightly-billing") {
		t.Errorf("show=running: want only the running source")
	}
	_, filtered := get(t, c, srv.URL+"/ops/?q=avito")
	if !strings.Contains(filtered, "scraper/avito") || strings.Contains(filtered, "nightly-billing") {
		t.Errorf("q=avito: want only scraper/avito")
	}
	_, hist := get(t, c, srv.URL+"/ops/sources/ticked")
	if !regexp.MustCompile(`<td>\d+(\.\d+)?s</td></tr>|late`).MatchString(hist) || !strings.Contains(hist, "succeeded") {
		t.Errorf("the ticked source's history lacks its status or lateness:\n%s", hist)
	}
	_, keys := get(t, c, srv.URL+"/ops/keys")
	for _, want := range []string{"api", "at most 2 running", "at least 1m0s between starts", "1 of 2", "until "} {
		if !strings.Contains(keys, want) {
			t.Errorf("the keys page lacks %q", want)
		}
	}
	code, _ := get(t, c, srv.URL+"/ops/sources/"+url.PathEscape("bad\xffname"))
	if code != http.StatusBadRequest {
		t.Errorf("a source that is not UTF-8: %d, want 400", code)
	}
	code, _ = get(t, c, srv.URL+"/ops/nowhere")
	if code != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d, want 404", code)
	}
}

// TestHostileTextIsInert: a job's error text with markup, a script, ANSI
// escapes and a bidirectional override shows as text, on every page that
// shows it.
func TestHostileTextIsInert(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	srv := serve(t, f.store, runclaimui.WithActions(), runclaimui.WithIdentity(asUser))
	c := client(t)
	for _, path := range []string{"/ops/", "/ops/sources/" + url.PathEscape("scraper/avito")} {
		_, body := get(t, c, srv.URL+path)
		for _, bad := range []string{"<script", "<img", "\x1b", "\u202e", "\a", "\x00"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: the page carries %q raw", path, bad)
			}
		}
		if m := handlerAttr.FindString(body); m != "" {
			t.Errorf("GET %s: a tag with an event handler: %s", path, m)
		}
	}
	_, hist := get(t, c, srv.URL+"/ops/sources/"+url.PathEscape("scraper/avito"))
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `\x1b[31mRED`, `\u202egnp.exe`, `\x07`} {
		if !strings.Contains(hist, want) {
			t.Errorf("the history does not show %q as text", want)
		}
	}
	resp, err := c.Get(srv.URL + "/ops/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy %q: want one that allows no script", csp)
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("X-Frame-Options %q, want DENY", resp.Header.Get("X-Frame-Options"))
	}
}

// TestActions: each action is confirmed, needs the identity's CSRF token,
// is logged with who did it, and does what it says in the database.
func TestActions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFixture(t)
	var logs logBuffer
	srv := serve(t, f.store, runclaimui.WithActions(), runclaimui.WithIdentity(asUser),
		runclaimui.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	c := client(t)
	_, page := get(t, c, srv.URL+"/ops/sources/nightly-billing")
	token := csrfOf(t, page)
	pauseURL := srv.URL + "/ops/sources/nightly-billing/pause"
	form := url.Values{"csrf": {token}, "for": {"2h"}, "note": {"deploy <freeze>"}}

	// Without the token, with another identity's, and cross-origin: refused,
	// nothing changes.
	if code, _, _ := post(t, c, pauseURL, url.Values{"for": {"2h"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("POST without a CSRF token: %d, want 403", code)
	}
	if code, _, _ := post(t, c, pauseURL, url.Values{"csrf": {token}, "confirm": {"yes"}}, "X-Test-User", "mallory"); code != http.StatusForbidden {
		t.Errorf("POST with alice's token as mallory: %d, want 403", code)
	}
	if code, _, _ := post(t, c, pauseURL, url.Values{"csrf": {token}, "confirm": {"yes"}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", code)
	}
	paused := func(source string) *runclaim.SourceControl {
		ctl, _, err := f.store.Controls(ctx, source)
		if err != nil {
			t.Fatal(err)
		}
		if len(ctl) == 0 || !ctl[0].Paused {
			return nil
		}
		return &ctl[0]
	}
	if paused("nightly-billing") != nil {
		t.Fatal("a refused POST paused the source")
	}

	// With the token: a confirmation first, which changes nothing.
	code, confirm, _ := post(t, c, pauseURL, form)
	if code != http.StatusOK || !strings.Contains(confirm, "Yes, pause") || !strings.Contains(confirm, `name="confirm" value="yes"`) {
		t.Fatalf("the first POST: %d, want a confirmation page:\n%s", code, confirm)
	}
	if paused("nightly-billing") != nil {
		t.Fatal("the confirmation page paused the source")
	}
	form.Set("confirm", "yes")
	code, _, h := post(t, c, pauseURL, form)
	if code != http.StatusSeeOther || h.Get("Location") != "../nightly-billing" {
		t.Fatalf("the confirmed POST: %d to %q, want 303 to the source's page", code, h.Get("Location"))
	}
	ctl := paused("nightly-billing")
	if ctl == nil {
		t.Fatal("the confirmed pause did not pause the source")
	}
	if ctl.Note != "[by alice] deploy <freeze>" {
		t.Errorf("the pause's note %q: want who made it, then the note", ctl.Note)
	}
	if d := ctl.PausedUntil.Sub(ctl.PausedAt); d < 2*time.Hour-time.Minute || d > 2*time.Hour+time.Minute {
		t.Errorf("paused from %v until %v: want 2h", ctl.PausedAt, ctl.PausedUntil)
	}
	if l := logs.String(); !strings.Contains(l, "action=pause") || !strings.Contains(l, "by=alice") || !strings.Contains(l, "target=nightly-billing") {
		t.Errorf("the log does not record who paused what:\n%s", l)
	}
	_, page = get(t, c, srv.URL+"/ops/sources/nightly-billing")
	if !strings.Contains(page, "[by alice] deploy &lt;freeze&gt;") || !strings.Contains(page, "paused") {
		t.Errorf("the source's page does not say who paused it")
	}

	do := func(path string, extra url.Values) {
		t.Helper()
		form := url.Values{"csrf": {token}, "confirm": {"yes"}}
		for k, v := range extra {
			form[k] = v
		}
		if code, body, _ := post(t, c, srv.URL+path, form); code != http.StatusSeeOther {
			t.Fatalf("POST %s: %d\n%s", path, code, body)
		}
	}
	do("/ops/sources/nightly-billing/resume", nil)
	if paused("nightly-billing") != nil {
		t.Error("resume did not resume")
	}
	do("/ops/sources/nightly-billing/trigger", nil)
	if ctl, _, _ := f.store.Controls(ctx, "nightly-billing"); len(ctl) == 0 || ctl[0].TriggeredAt.IsZero() {
		t.Error("trigger did not trigger")
	}
	do("/ops/sources/running/release", url.Values{"id": {strconv.FormatInt(f.run.ID, 10)}})
	if running, _, _ := f.store.Running(ctx, "running"); len(running) != 0 {
		t.Errorf("release left %d running", len(running))
	}
	do("/ops/keys/api/end-cooldown", nil)
	do("/ops/keys/api/limit", url.Values{"max_running": {"5"}, "min_gap": {"30s"}})
	keys, _, err := f.store.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Key == "api" && (k.Limit != runclaim.Limit{MaxRunning: 5, MinGap: 30 * time.Second} || !k.CoolingUntil.IsZero()) {
			t.Errorf("key api: %+v; want limit 5 running, 30s gap, no cooldown", k)
		}
	}
	do("/ops/bulk", url.Values{"action": {"pause"}, "source": {"nightly-billing", "ticked"}, "note": {"incident 42"}})
	for _, s := range []string{"nightly-billing", "ticked"} {
		if ctl := paused(s); ctl == nil || ctl.Note != "[by alice] incident 42" || !ctl.PausedUntil.IsZero() {
			t.Errorf("bulk pause of %s: %+v", s, ctl)
		}
	}
	do("/ops/bulk", url.Values{"action": {"resume"}, "source": {"nightly-billing", "ticked"}})
	for _, s := range []string{"nightly-billing", "ticked"} {
		if paused(s) != nil {
			t.Errorf("bulk resume left %s paused", s)
		}
	}

	// Bad input: a clear 400, and nothing changes.
	for path, extra := range map[string]url.Values{
		"/ops/sources/nightly-billing/pause":   {"for": {"-1h"}},
		"/ops/sources/nightly-billing/explode": nil,
		"/ops/sources/running/release":         {"id": {"x"}},
		"/ops/keys/api/limit":                  {"max_running": {"-1"}},
		"/ops/bulk":                            {"action": {"pause"}},
	} {
		form := url.Values{"csrf": {token}, "confirm": {"yes"}}
		for k, v := range extra {
			form[k] = v
		}
		if code, _, _ := post(t, c, srv.URL+path, form); code != http.StatusBadRequest {
			t.Errorf("POST %s %v: %d, want 400", path, extra, code)
		}
	}
	if paused("nightly-billing") != nil {
		t.Error("a refused pause paused the source")
	}
}

// nilPool is a Querier that is never called: New's input checks need a
// store, not a database.
type nilPool struct{ runclaim.Querier }
