package runclaimui_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/runclaim/runclaim/internal/sharedtest"
	"github.com/runclaim/runclaim/runclaimui"
)

// envScreenshots names a directory that the browser tests also write
// their screenshots to, under fixed names (docs/console uses them):
// RUNCLAIMUI_SCREENSHOTS=../docs/images go test -run TestBrowser ./runclaimui
const envScreenshots = "RUNCLAIMUI_SCREENSHOTS"

// browser starts a headless Chromium for the test, or skips it with a
// line that says what to install; with PGTEST_REQUIRED=1, as in CI, a
// missing browser fails the test instead.
func browser(t *testing.T) (context.Context, *atomic.Int64) {
	t.Helper()
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		msg := "no Chromium: the browser tests need one (Debian: apt-get install chromium)"
		if os.Getenv("PGTEST_REQUIRED") == "1" {
			t.Fatal(msg + "; PGTEST_REQUIRED=1 makes that a failure")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, sharedtest.Scale(t, 90*time.Second))
	t.Cleanup(cancelTimeout)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	// A script that ran would most likely open a dialog (the hostile text
	// calls alert): count them, and dismiss each so that nothing hangs.
	var dialogs atomic.Int64
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range opening {
			if err != nil {
				return
			}
			dialogs.Add(1)
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return ctx, &dialogs
}

// shot saves a screenshot of the whole page into the test's artifacts
// (go test -artifacts keeps them), and into $RUNCLAIMUI_SCREENSHOTS.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv(envScreenshots); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBrowser loads each page in a real browser against a real Postgres
// with runs, a pause, a key and a hostile error text; pauses and resumes a
// source through the forms, checking the database; and sees a POST
// without its token refused.
func TestBrowser(t *testing.T) {
	f := newFixture(t)
	srv := serve(t, f.store, runclaimui.WithActions(), runclaimui.WithIdentity(asUser), runclaimui.WithMaxAge(time.Hour))
	ctx, dialogs := browser(t)
	base := srv.URL + "/ops/"

	var text string
	// read sets text to what sel shows.
	read := func(sel string) {
		t.Helper()
		var err error
		if text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel))); err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
	}
	load := func(u string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS("footer"))); err != nil {
			t.Fatalf("load %s: %v", u, err)
		}
		read("body")
		scripts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("script, img, iframe, object, embed").length`))
		if err != nil {
			t.Fatal(err)
		}
		if scripts != 0 {
			t.Errorf("%s: %d script, image or frame elements: a text from the database became markup", u, scripts)
		}
	}
	// click clicks sel and waits for the page it loads.
	click := func(sel string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}

	load(base)
	for _, want := range []string{"scraper/avito", "nightly-billing", "paused-source", "Keys cooling down", "actions on, as alice"} {
		if !strings.Contains(text, want) {
			t.Errorf("the sources page lacks %q", want)
		}
	}
	shot(t, ctx, "sources")

	load(base + "sources/" + url.PathEscape("scraper/avito"))
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("details summary"))); err != nil {
		t.Fatal(err)
	}
	read("body")
	for _, want := range []string{"<script>alert(1)</script>", `\x1b[31mRED`, `\u202egnp.exe`, "failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the history does not show %q as text", want)
		}
	}
	shot(t, ctx, "history")

	load(base + "keys")
	if !strings.Contains(text, "at most 2 running") {
		t.Errorf("the keys page lacks the limit")
	}
	shot(t, ctx, "keys")

	// Pause through the form, confirm, and see it in the database and on
	// the page.
	load(base + "sources/nightly-billing")
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`form[action$="/pause"] input[name=for]`), "3h"),
		chromedp.SetValue(chromedp.CSS(`form[action$="/pause"] input[name=note]`), "deploy freeze"),
	); err != nil {
		t.Fatal(err)
	}
	click(`form[action$="/pause"] button`)
	read("main")
	if !strings.Contains(text, "pause: nightly-billing?") {
		t.Fatalf("no confirmation page after Pause: %q", text)
	}
	shot(t, ctx, "confirm")
	if ctl, _, _ := f.store.Controls(ctx, "nightly-billing"); len(ctl) != 0 && ctl[0].Paused {
		t.Fatal("the confirmation page paused the source")
	}
	click(`button.danger`)
	read("p.paused-note")
	if !strings.Contains(text, "[by alice] deploy freeze") {
		t.Errorf("the source's page says %q, want who paused it and the note", text)
	}
	ctl, _, err := f.store.Controls(ctx, "nightly-billing")
	if err != nil || len(ctl) != 1 || !ctl[0].Paused || ctl[0].Note != "[by alice] deploy freeze" {
		t.Fatalf("after the confirmed pause, the database has %+v, %v", ctl, err)
	}
	if d := ctl[0].PausedUntil.Sub(ctl[0].PausedAt); d < 3*time.Hour-time.Minute || d > 3*time.Hour+time.Minute {
		t.Errorf("paused for %v, want 3h", d)
	}

	// Resume, confirmed.
	click(`form[action$="/resume"] button`)
	click(`button.danger`)
	if ctl, _, err := f.store.Controls(ctx, "nightly-billing"); err != nil || len(ctl) != 0 && ctl[0].Paused {
		t.Errorf("after the confirmed resume, the database has %+v, %v", ctl, err)
	}

	// A form whose token was taken out: refused, and nothing changes.
	load(base + "sources/nightly-billing")
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("input[name=csrf]").forEach(e => e.remove())`)); err != nil {
		t.Fatal(err)
	}
	click(`form[action$="/trigger"] button`)
	read("body")
	if !strings.Contains(text, "CSRF token is missing or wrong") {
		t.Errorf("a POST without its token: the page says %q, want it refused", text)
	}
	if ctl, _, _ := f.store.Controls(ctx, "nightly-billing"); len(ctl) != 0 && !ctl[0].TriggeredAt.IsZero() {
		t.Error("a POST without its token triggered the source")
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened: a script ran", n)
	}
}

// TestBrowserReadOnly: without WithActions, no page shows a form that
// posts, and the pages read with scripts off.
func TestBrowserReadOnly(t *testing.T) {
	f := newFixture(t)
	srv := serve(t, f.store)
	ctx, _ := browser(t)
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "sources/running", "keys"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ops/"+path), chromedp.WaitReady(chromedp.CSS("footer"))); err != nil {
			t.Fatal(err)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if err != nil {
			t.Fatal(err)
		}
		posts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("form[method=post]").length`))
		if err != nil {
			t.Fatal(err)
		}
		if posts != 0 {
			t.Errorf("/%s: %d forms that post on a read-only console", path, posts)
		}
		if !strings.Contains(text, "read-only") || !strings.Contains(text, "running") {
			t.Errorf("/%s: %q", path, text)
		}
	}
	shot(t, ctx, "read-only")
}
