// Package runclaimui is a web console for runclaim's Postgres store: the
// sources at a glance (running, paused, overdue, failing), each source's
// history, the keys with their limits and cooldowns, and the schema
// version; and, when enabled, the operator's actions one click away:
// pause, resume, trigger, release, end a cooldown, set a limit, and bulk
// pause and resume.
//
// It is a module of its own, so that a service that does not mount it
// downloads nothing for it. It is server-rendered html/template with no
// JavaScript at all: every page reads with scripts off, and every action
// is an HTML form.
//
//	ui, err := runclaimui.New(store) // store: a *runclaim.PostgresStore; read-only
//	if err != nil { ... }
//	mux.Handle("/runclaim/", http.StripPrefix("/runclaim", requireOperator(ui)))
//
// # Routes
//
// Relative to where the handler is mounted:
//
//	GET  /                          the sources
//	GET  /sources/{source}          one source's history (the source path-escaped)
//	GET  /keys                      the keys
//	POST /sources/{source}/pause    pause (form fields note, for: a duration; empty for until resumed)
//	POST /sources/{source}/resume   resume
//	POST /sources/{source}/trigger  trigger
//	POST /sources/{source}/release  release the running run (form field id)
//	POST /keys/{key}/end-cooldown   end the key's cooldown
//	POST /keys/{key}/limit          set the key's limit (max_running, max_starts, per, min_gap)
//	POST /bulk                      pause or resume the sources selected (action, source...)
//
// # Security
//
// The console is read-only unless WithActions is given, and then every
// action needs the identity that WithIdentity's function returns for the
// request: the embedding service owns authentication, and mounts the
// handler behind it. An action is a POST with a CSRF token bound to that
// identity, checked in constant time, and the browser's cross-origin
// signals (Sec-Fetch-Site, Origin) are checked as well
// (http.CrossOriginProtection). An action is confirmed on a page of its
// own before it is done, and logged with who did it; a pause records who
// made it in its note. Every text read from the database is escaped by
// html/template, and control, ANSI, bidirectional-override and other
// invisible characters are shown as visible escapes, as the CLI shows them. The pages carry a Content-Security-Policy
// that allows no script, and may not be framed.
//
// See docs/console.md in the runclaim repository.
package runclaimui
