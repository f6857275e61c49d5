package runclaim

import (
	"strings"
	"testing"
)

// TestNameAndNoteRules: each check refuses what its doc says, naming the
// reason, and takes what it allows.
func TestNameAndNoteRules(t *testing.T) {
	long := strings.Repeat("n", MaxPauseNoteLen+1)
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"plain name", validateName("nightly", 10), ""},
		{"plain empty", validateName("", 10), "empty"},
		{"plain long", validateName("elevenbytes", 10), "11 bytes long, more than the limit of 10"},
		{"plain invalid UTF-8", validateName("a\xff", 10), "not valid UTF-8"},
		{"plain NUL", validateName("a\x00", 10), "NUL byte at offset 1"},
		{"plain control", validateName("a\tb", 10), "control character U+0009 at offset 1"},
		{"plain takes an invisible character", validateName("a\u200bb", 10), ""},
		{"a name refuses it", checkName("a\u200bb", 10), "invisible or format character U+200B at offset 1"},
		{"a source refuses it", ValidateSource("a\u200bb"), "invisible or format character U+200B at offset 1"},
		{"key", validateKey("site"), ""},
		{"key empty", validateKey(""), "runclaim: invalid key: empty"},
		{"key invisible", validateKey("si\u2066te"), "runclaim: invalid key: invisible or format character U+2066 at offset 2"},
		{"note empty", validateNote("pause", ""), ""},
		{"note long", validateNote("pause", long), "runclaim: pause note is 1025 bytes, more than 1024"},
		{"note invalid UTF-8", validateNote("cooldown", "\xff"), "runclaim: cooldown note is not valid UTF-8"},
		{"note NUL", validateNote("cooldown", "a\x00"), "runclaim: cooldown note has a NUL byte at offset 1"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
}
