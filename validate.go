package runclaim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/runclaim/runclaim/internal/rules"
)

// ValidateSource reports whether source can be claimed: it must be valid
// UTF-8, between 1 and MaxSourceLen bytes, and free of NUL bytes and other
// control characters, and of characters that are invisible or change how
// the text around them is shown (see below). The error wraps
// ErrInvalidSource. Stores call it before they send anything.
//
// The invisible characters refused are the Unicode format characters
// (category Cf: zero-width spaces and joiners, bidirectional overrides and
// isolates, the byte order mark, the soft hyphen, ...), the line and
// paragraph separators U+2028 and U+2029, variation selectors and the other
// default-ignorable code points. With any of them, two different sources
// could both read "nightly" in a log, a dashboard or the ops CLI; an
// operator would release or prune the wrong one. Emoji sequences joined by
// U+200D or ended by a variation selector are refused with them.
func ValidateSource(source string) error {
	if err := rules.Name(source, MaxSourceLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSource, err)
	}
	return nil
}

// validateName returns an error if s is empty, longer than max bytes, not
// valid UTF-8, or holds a NUL byte or another control character.
func validateName(s string, max int) error { return rules.Plain(s, max) }

func checkContext(ctx context.Context) error {
	if ctx == nil {
		return errors.New("runclaim: nil context")
	}
	return nil
}

// checkRequest is a store method's first check: a context, and a request
// that is valid (its Validate).
func checkRequest(ctx context.Context, req interface{ Validate() error }) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	return req.Validate()
}

// isNil reports whether v is nil or a nil pointer, map, slice, func, chan
// or interface wrapped in a non-nil interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// quoteForError quotes a source for an error message, cut to 64 bytes.
func quoteForError(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

// validateKey returns an error if key cannot be named by a claim: the
// rules of ValidateSource, with MaxKeyLen.
func validateKey(key string) error { return rules.Key(key, MaxKeyLen) }

// validateKeys returns an error for a list of keys a claim cannot name:
// more than MaxKeys, an invalid key, or a key listed twice.
func validateKeys(keys []string) error {
	if len(keys) > MaxKeys {
		return fmt.Errorf("runclaim: %d keys, more than MaxKeys (%d)", len(keys), MaxKeys)
	}
	for i, k := range keys {
		if err := validateKey(k); err != nil {
			return err
		}
		if slices.Contains(keys[:i], k) {
			return fmt.Errorf("runclaim: key %s is listed twice", quoteForError(k))
		}
	}
	return nil
}

// validateNote returns an error if note cannot be stored with a pause or
// a cooldown (kind names which): longer than MaxPauseNoteLen bytes, not
// valid UTF-8, or with a NUL byte. An empty note is valid.
func validateNote(kind, note string) error { return rules.Note(kind, note, MaxPauseNoteLen) }
