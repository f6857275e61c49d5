// Package rules holds the checks of names and notes that the stores, the
// CLI and the conformance tests share: what a source, a key, a pause's
// note and a cooldown's note may hold. The runclaim package exports the
// check of a source (runclaim.ValidateSource); the others are its stores'
// own, and this package's for the CLI, which refuses a bad argument as a
// usage error before it connects.
package rules

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Name returns an error, without a prefix, if s cannot name a source or a
// key: Plain's rules, and no character that is invisible or changes how
// the text around it is shown (Invisible).
func Name(s string, max int) error {
	if err := Plain(s, max); err != nil {
		return err
	}
	for i, r := range s {
		if Invisible(r) {
			return fmt.Errorf("invisible or format character %U at offset %d", r, i)
		}
	}
	return nil
}

// Plain returns an error, without a prefix, if s is empty, longer than max
// bytes, not valid UTF-8, or holds a NUL byte or another control
// character: the rules of an owner, a schema, a table or a namespace.
func Plain(s string, max int) error {
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

// Invisible reports whether r is a character that Name refuses for being
// invisible or acting on the text around it: the Unicode format
// characters (category Cf), the line and paragraph separators, variation
// selectors and the other default-ignorable code points.
func Invisible(r rune) bool {
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// Key returns an error if key cannot be named by a claim: Name's rules,
// with max the longest key.
func Key(key string, max int) error {
	if err := Name(key, max); err != nil {
		return fmt.Errorf("runclaim: invalid key: %w", err)
	}
	return nil
}

// Note returns an error if note cannot be stored with a pause or a
// cooldown (kind names which): longer than max bytes, not valid UTF-8, or
// with a NUL byte. An empty note is valid.
func Note(kind, note string, max int) error {
	switch {
	case len(note) > max:
		return fmt.Errorf("runclaim: %s note is %d bytes, more than %d", kind, len(note), max)
	case !utf8.ValidString(note):
		return fmt.Errorf("runclaim: %s note is not valid UTF-8", kind)
	}
	if i := strings.IndexByte(note, 0); i >= 0 {
		return fmt.Errorf("runclaim: %s note has a NUL byte at offset %d", kind, i)
	}
	return nil
}
