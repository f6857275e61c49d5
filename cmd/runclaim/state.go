package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/runclaim/runclaim"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newStateCommand makes 'runclaim state', which shows, sets or clears a
// source's state.
func newStateCommand(c *cli) *cobra.Command {
	return define(c, &cobra.Command{
		Use:   "state <source> [--set-file FILE | --clear] [--force]",
		Short: "show a source's state (its cursor), or set or clear it",
		Long: `Shows the state that the next run of a source will get from Run.State: the
state its runs saved last (Run.SaveState), or that an operator set. It is
shown as text when it is valid UTF-8, else in base64.

--set-file FILE sets it to the bytes of FILE ('-': standard input), at most
64 KiB; --clear removes it, so that the next run gets none. Both are for an
operator who must rewind a cursor, and both are refused while a run of the
source holds it (that run read the state when it was claimed, and its next
save would overwrite yours) unless --force. States need the runs table at
schema version 9 ('runclaim migrate').

Examples:
  runclaim state feed
  printf '2026-12-01T00:00:00Z' | runclaim state feed --set-file -
  runclaim state feed --clear --force

JSON output: {"source", "has_state", "text" (null unless the state is
UTF-8), "base64", "bytes", "saved_at", "run_id" (null when an operator set
it)}; after --clear, {"source", "cleared"}.`,
		Args: maxArgs(1),
	}, runState)
}

// stateOptions are state's: the source, --set-file, --clear, --force.
type stateOptions struct {
	sourceArg
	setFile string
	clear   bool
	force   bool
}

func (o *stateOptions) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.setFile, "set-file", "", "set the state to the bytes of `FILE` ('-': standard input)")
	fs.BoolVar(&o.clear, "clear", false, "remove the state: the next run gets none")
	fs.BoolVar(&o.force, "force", false, "set or clear even while a run of the source holds it")
}

// Validate checks the source and that at most one change is asked for.
func (o *stateOptions) Validate() error {
	if err := o.sourceArg.Validate(); err != nil {
		return err
	}
	if o.setFile != "" && o.clear {
		return errors.New("--set-file and --clear exclude each other")
	}
	if o.force && o.setFile == "" && !o.clear {
		return errors.New("--force applies to --set-file and --clear only")
	}
	return nil
}

func runState(ctx context.Context, c *cli, o *stateOptions) int {
	store, err := c.store(ctx)
	if err != nil {
		return c.fail("state", err)
	}
	switch {
	case o.clear:
		had, err := store.ClearState(ctx, o.source, o.force)
		if err != nil {
			return c.fail("state", err)
		}
		if c.json {
			err = writeJSON(c.stdout, struct {
				Source  string `json:"source"`
				Cleared bool   `json:"cleared"`
			}{o.source, had})
		} else if had {
			_, err = fmt.Fprintf(c.stdout, "cleared the state of %q: its next run gets none\n", o.source)
		} else {
			_, err = fmt.Fprintf(c.stdout, "%q had no state: nothing to clear\n", o.source)
		}
		if err != nil {
			return c.fail("state", err)
		}
		return exitOK
	case o.setFile != "":
		data, err := readStateFile(c, o.setFile)
		if err != nil {
			return c.fail("state", err)
		}
		if err := store.SetState(ctx, o.source, data, o.force); err != nil {
			return c.fail("state", err)
		}
	}
	st, ok, err := store.State(ctx, o.source)
	if err != nil {
		return c.fail("state", err)
	}
	if c.json {
		out := struct {
			Source   string     `json:"source"`
			HasState bool       `json:"has_state"`
			Text     *string    `json:"text"`
			Base64   *string    `json:"base64"`
			Bytes    int        `json:"bytes"`
			SavedAt  *time.Time `json:"saved_at"`
			RunID    *int64     `json:"run_id"`
		}{Source: o.source, HasState: ok}
		if ok {
			b64 := base64.StdEncoding.EncodeToString(st.State)
			out.Base64, out.Bytes, out.SavedAt = &b64, len(st.State), &st.SavedAt
			if utf8.Valid(st.State) {
				text := string(st.State)
				out.Text = &text
			}
			if st.RunID != 0 {
				out.RunID = &st.RunID
			}
		}
		err = writeJSON(c.stdout, out)
	} else if !ok {
		_, err = fmt.Fprintf(c.stdout, "%q has no state: its next run gets none\n", o.source)
	} else {
		by := "set by an operator"
		if st.RunID != 0 {
			by = fmt.Sprintf("saved by run %d", st.RunID)
		}
		form, text := "text", visible(string(st.State))
		if !utf8.Valid(st.State) {
			form, text = "base64", base64.StdEncoding.EncodeToString(st.State)
		}
		_, err = fmt.Fprintf(c.stdout, "state of %q, %d bytes, %s at %s (%s):\n%s\n", o.source, len(st.State), by, formatTime(st.SavedAt), form, text)
	}
	if err != nil {
		return c.fail("state", err)
	}
	return exitOK
}

// readStateFile reads the state to set from name, or standard input for
// "-", refusing more than MaxStateLen bytes.
func readStateFile(c *cli, name string) ([]byte, error) {
	var r io.Reader = c.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("--set-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, runclaim.MaxStateLen+1))
	if err != nil {
		return nil, fmt.Errorf("--set-file: %w", err)
	}
	if len(data) > runclaim.MaxStateLen {
		return nil, fmt.Errorf("--set-file: more than %d bytes: a state is at most runclaim.MaxStateLen bytes", runclaim.MaxStateLen)
	}
	return data, nil
}
