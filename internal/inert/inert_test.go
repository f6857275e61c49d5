package inert

import "testing"

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		in             string
		lines, oneLine string
	}{
		{"plain text, \\ kept", "plain text, \\ kept", "plain text, \\ kept"},
		{"a\nb\tc", "a\nb\tc", `a\nb\tc`},
		{"\x1b[31mred\r", `\x1b[31mred\r`, `\x1b[31mred\r`},
		{"ab\u202ecd\u200b", `ab\u202ecd\u200b`, `ab\u202ecd\u200b`},
		{"x\xffy", `x\xffy`, `x\xffy`},
		{"tag\U000e0041", `tag\U000e0041`, `tag\U000e0041`},
		{"\u00e9t\u00e9 \u2603", "\u00e9t\u00e9 \u2603", "\u00e9t\u00e9 \u2603"},
	} {
		if got := Escape(tc.in, true); got != tc.lines {
			t.Errorf("Escape(%q, true) = %q, want %q", tc.in, got, tc.lines)
		}
		if got := Escape(tc.in, false); got != tc.oneLine {
			t.Errorf("Escape(%q, false) = %q, want %q", tc.in, got, tc.oneLine)
		}
	}
}
