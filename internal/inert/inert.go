// Package inert makes text from a database inert for display: on a
// terminal (the CLI) and in a page (the console), a control character, an
// invisible or reordering one, or a byte that is not UTF-8 is shown as an
// escape, so that stored text cannot recolour, reorder or hide what is
// shown around it.
package inert

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NeedsEscape reports whether r must not reach a terminal as it is: a
// control character (C0, DEL, C1: ESC starts the sequences that recolour
// text, retitle a window or clear a line), or a character that is invisible
// or changes how the text around it is shown (Unicode format characters
// such as bidirectional overrides and zero-width spaces, line and paragraph
// separators, variation selectors and the other default-ignorable code
// points), with which two different names could look the same. It is the
// set runclaim.ValidateSource refuses in sources, plus the controls.
func NeedsEscape(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp,
		unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// Escape returns s with every character NeedsEscape reports shown as an
// escape, as Go writes it: \n, \t, \r, \x1b, \u202e, \U000e0041; a byte
// that is not valid UTF-8 is shown as \xff. With keepLines, newlines and
// tabs stay as they are. Everything else, backslashes included, is left
// as it is.
func Escape(s string, keepLines bool) string {
	clean := true
	for _, r := range s {
		if (r == utf8.RuneError || NeedsEscape(r)) && !(keepLines && (r == '\n' || r == '\t')) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && NeedsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff && NeedsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case NeedsEscape(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
