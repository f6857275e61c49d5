package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/user"
	"time"

	"github.com/runclaim/runclaim/runclaimui"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newUICommand makes 'runclaim ui', which serves the web console.
func newUICommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "ui [--addr HOST:PORT] [--actions [--identity NAME]] [--max-age D]",
		Short: "serve the web console: sources, histories, keys; actions with --actions",
		Long: `Serves the web console (the runclaimui module) until interrupted: the
sources (running, paused, overdue, failing), each source's history, the
keys with their limits and cooldowns, and the schema version.

It is read-only unless --actions is given. Then its forms pause, resume,
trigger, release, end a cooldown and set a limit, each confirmed on a page
of its own, with a CSRF token, and logged on standard error with who did it:
the OS user that started it, or --identity. Anyone who reaches the address
acts as that identity, so --actions needs a loopback address (127.0.0.1,
::1, localhost); to offer actions to a team, mount runclaimui in a service,
behind its authentication (docs/console.md).

  --addr HOST:PORT   where to listen (default 127.0.0.1:8080; port 0 picks one)
  --actions          turn the actions on
  --identity NAME    who the actions are recorded as (default: the OS user)
  --max-age D        a source is overdue when no run of it succeeded within D

Examples:
  runclaim ui
  runclaim ui --addr 127.0.0.1:9000 --max-age 26h
  runclaim ui --actions --identity alice

Exit codes: 0 stopped by SIGINT or SIGTERM; 1 a database error or an
address it cannot listen on; 2 bad usage.`,
		Annotations: map[string]string{annotNoJSON: "true", annotWrites: "true"},
	}, runUI)
}

// uiOptions are ui's flags.
type uiOptions struct {
	noArgs
	addr, identity, age string
	actions             bool
	maxAge              time.Duration // parsed by Validate
}

func (o *uiOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen on `HOST:PORT`")
	fs.BoolVar(&o.actions, "actions", false, "turn the console's actions on (a loopback address only)")
	fs.StringVar(&o.identity, "identity", "", "record the actions as `NAME` (default: the OS user)")
	fs.StringVar(&o.age, "max-age", "", "overdue when no run succeeded within `D` (e.g. 26h)")
}

func (o *uiOptions) Validate() error {
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("--addr %q: want HOST:PORT, such as 127.0.0.1:8080", o.addr)
	}
	if o.identity != "" && !o.actions {
		return errors.New("--identity names who does the actions: give --actions too")
	}
	if o.actions && !loopback(host) {
		return fmt.Errorf("--actions on %q: anyone who reaches that address would act as one identity; use a loopback address, or mount runclaimui behind your service's authentication", o.addr)
	}
	if o.age != "" {
		d, err := parsePositiveAge("--max-age", o.age)
		if err != nil {
			return err
		}
		o.maxAge = d
	}
	return nil
}

// loopback reports whether host names this machine only.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runUI(ctx context.Context, c *cli, o *uiOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("ui", err)
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, nil))
	opts := []runclaimui.Option{runclaimui.WithLogger(logger)}
	if o.maxAge > 0 {
		opts = append(opts, runclaimui.WithMaxAge(o.maxAge))
	}
	who := "read-only"
	if o.actions {
		who = o.identity
		if who == "" {
			u, err := user.Current()
			if err != nil || u.Username == "" {
				return c.fail("ui", fmt.Errorf("no OS user to record the actions as (%v): give --identity", err))
			}
			who = u.Username
		}
		name := who
		opts = append(opts, runclaimui.WithActions(), runclaimui.WithIdentity(func(*http.Request) (string, error) { return name, nil }))
		who = "actions as " + who
	}
	ui, err := runclaimui.New(store, opts...)
	if err != nil {
		return c.fail("ui", err)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return c.fail("ui", err)
	}
	srv := &http.Server{Handler: ui, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	ctx, stop := interruptible(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(c.stdout, "runclaim ui: serving the console of %s at http://%s/ (%s); stop with Ctrl-C\n", store.Table(), ln.Addr(), who)
	select {
	case err := <-done:
		return c.fail("ui", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return c.fail("ui", err)
	}
	return exitOK
}
