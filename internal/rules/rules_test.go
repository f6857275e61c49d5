package rules

import (
	"strings"
	"testing"
)

// TestRules: each check refuses what its doc says, naming the reason, and
// takes what it allows.
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"plain name", Plain("nightly", 10), ""},
		{"plain empty", Plain("", 10), "empty"},
		{"plain long", Plain("elevenbytes", 10), "11 bytes long, more than the limit of 10"},
		{"plain invalid UTF-8", Plain("a\xff", 10), "not valid UTF-8"},
		{"plain NUL", Plain("a\x00", 10), "NUL byte at offset 1"},
		{"plain control", Plain("a\tb", 10), "control character U+0009 at offset 1"},
		{"plain takes an invisible character", Plain("a\u200bb", 10), ""},
		{"name refuses it", Name("a\u200bb", 10), "invisible or format character U+200B at offset 1"},
		{"key", Key("site", 10), ""},
		{"key empty", Key("", 10), "runclaim: invalid key: empty"},
		{"note empty", Note("pause", "", 4), ""},
		{"note long", Note("pause", "12345", 4), "runclaim: pause note is 5 bytes, more than 4"},
		{"note invalid UTF-8", Note("cooldown", "\xff", 4), "runclaim: cooldown note is not valid UTF-8"},
		{"note NUL", Note("cooldown", "a\x00", 4), "runclaim: cooldown note has a NUL byte at offset 1"},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want no error", tc.name, tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
}
