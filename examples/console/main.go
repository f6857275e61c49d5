// Command console embeds runclaim's web console in a service: the
// service's own mux, its own authentication (HTTP basic here, for the
// example), and the console mounted under /runclaim/ behind it, with the
// actions on and the authenticated user as the identity they are recorded
// as.
//
// It needs a database: DATABASE_URL. It runs a few jobs, serves the
// console on 127.0.0.1, and checks it as a browser would (it reads the
// sources page, pauses a source through the form, confirms, and finds
// the pause in the database, recorded with who made it), then exits. With
// -serve it keeps serving until interrupted, for a look:
//
//	DATABASE_URL=postgres://... go run ./examples/console -serve -addr 127.0.0.1:8080
//	open http://ops:secret@127.0.0.1:8080/runclaim/
package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runclaim/runclaim"
	"github.com/runclaim/runclaim/runclaimui"
)

// The service's operators, for the example: a real service asks its
// identity provider.
var operators = map[string]string{"ops": "secret"}

// requireOperator is the service's authentication: a request without a
// known operator gets 401 and never reaches the console.
func requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := operator(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="operators"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// operator names who makes the request: the console's identity function.
func operator(r *http.Request) (string, error) {
	user, pass, ok := r.BasicAuth()
	want, known := operators[user]
	if !ok || !known || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
		return "", errors.New("not an operator")
	}
	return user, nil
}

func main() {
	serve := flag.Bool("serve", false, "keep serving until interrupted")
	addr := flag.String("addr", "127.0.0.1:0", "where to listen")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *serve); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string, serve bool) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("console: set DATABASE_URL: the console reads a Postgres store")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := runclaim.NewPostgresStore(pool, runclaim.WithTable(runclaim.DefaultSchema, "runclaim_example_runs"))
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}

	// The service's jobs: a success and a failure to show.
	claimer, err := runclaim.New(store, runclaim.WithOwner("console-example"))
	if err != nil {
		return err
	}
	for _, job := range []struct {
		source string
		err    error
	}{{"console/nightly-report", nil}, {"console/sync-crm", errors.New("crm: 503 Service Unavailable")}} {
		err := claimer.Do(ctx, job.source, func(context.Context, *runclaim.Run) error { return job.err })
		if err != nil && !errors.Is(err, runclaim.ErrNotClaimed) && !errors.Is(err, job.err) {
			return err
		}
	}

	ui, err := runclaimui.New(store,
		runclaimui.WithActions(),
		runclaimui.WithIdentity(operator),
		runclaimui.WithMaxAge(26*time.Hour),
	)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/runclaim/", requireOperator(http.StripPrefix("/runclaim", ui)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String() + "/runclaim/"
	fmt.Printf("console: serving %s (user ops, password secret)\n", base)
	if serve {
		<-ctx.Done()
		return nil
	}
	return check(ctx, store, base)
}

// check uses the console as a browser would, and checks what it did.
func check(ctx context.Context, store *runclaim.PostgresStore, base string) error {
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, u string, form url.Values, user string) (int, string, error) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, u, body)
		if err != nil {
			return 0, "", err
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if user != "" {
			req.SetBasicAuth(user, operators[user])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	if code, _, err := do("GET", base, nil, ""); err != nil || code != http.StatusUnauthorized {
		return fmt.Errorf("console: GET without credentials: %d, %v; want 401 from the service's authentication", code, err)
	}
	code, page, err := do("GET", base+"sources/"+url.PathEscape("console/sync-crm"), nil, "ops")
	if err != nil || code != http.StatusOK || !strings.Contains(page, "crm: 503 Service Unavailable") {
		return fmt.Errorf("console: the source's page: %d, %v", code, err)
	}
	fmt.Println("console: the history of console/sync-crm shows its failure")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		return errors.New("console: no form on the source's page, with the actions on")
	}
	form := url.Values{"csrf": {m[1]}, "for": {"1h"}, "note": {"upstream outage"}, "confirm": {"yes"}}
	if code, _, err := do("POST", base+"sources/"+url.PathEscape("console/sync-crm")+"/pause", form, "ops"); err != nil || code != http.StatusSeeOther {
		return fmt.Errorf("console: pause: %d, %v", code, err)
	}
	controls, _, err := store.Controls(ctx, "console/sync-crm")
	if err != nil {
		return err
	}
	if len(controls) != 1 || !controls[0].Paused || controls[0].Note != "[by ops] upstream outage" {
		return fmt.Errorf("console: after the pause, the database has %+v", controls)
	}
	fmt.Printf("console: paused console/sync-crm through the console until %s, note %q\n", controls[0].PausedUntil.Format(time.RFC3339), controls[0].Note)
	if err := store.Resume(ctx, "console/sync-crm"); err != nil {
		return err
	}
	fmt.Println("console: resumed it, for the next run of this example")
	return nil
}
