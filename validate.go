package runclaim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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
	if err := checkName(source, MaxSourceLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSource, err)
	}
	return nil
}

// checkName returns an error, without a prefix, if s cannot name a source
// or a key: validateName's rules, and no character that is invisible or
// changes how the text around it is shown (invisible).
func checkName(s string, max int) error {
	if err := validateName(s, max); err != nil {
		return err
	}
	for i, r := range s {
		if invisible(r) {
			return fmt.Errorf("invisible or format character %U at offset %d", r, i)
		}
	}
	return nil
}

// validateName returns an error, without a prefix, if s is empty, longer
// than max bytes, not valid UTF-8, or holds a NUL byte or another control
// character: the rules of an owner, a schema, a table or a namespace.
func validateName(s string, max int) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > max:
		return fmt.Errorf("%d bytes long, more than the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if r == 0 {
			return fmt.Errorf("NUL byte at offset %d", i)
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U at offset %d", r, i)
		}
	}
	return nil
}

// invisible reports whether r is a character that checkName refuses for
// being invisible or acting on the text around it: the Unicode format
// characters (category Cf), the line and paragraph separators, variation
// selectors and the other default-ignorable code points.
func invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

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
func validateKey(key string) error {
	if err := checkName(key, MaxKeyLen); err != nil {
		return fmt.Errorf("runclaim: invalid key: %w", err)
	}
	return nil
}

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
func validateNote(kind, note string) error {
	switch {
	case len(note) > MaxPauseNoteLen:
		return fmt.Errorf("runclaim: %s note is %d bytes, more than %d", kind, len(note), MaxPauseNoteLen)
	case !utf8.ValidString(note):
		return fmt.Errorf("runclaim: %s note is not valid UTF-8", kind)
	}
	if i := strings.IndexByte(note, 0); i >= 0 {
		return fmt.Errorf("runclaim: %s note has a NUL byte at offset %d", kind, i)
	}
	return nil
}
