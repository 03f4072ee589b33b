package message

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.5", `"10.0.0.5"`},
		{"", `""`},
		{"a\nb", `"a\nb"`},
		{strings.Repeat("a", MaxValue), `"` + strings.Repeat("a", MaxValue) + `"`},
		{strings.Repeat("a", 40000), `"` + strings.Repeat("a", MaxValue) + `"… (40000 bytes)`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%.20q…) = %.60q…, want %.60q…", tc.in, got, tc.want)
		}
	}
}

func TestQuoteCutsOnACharacterBoundary(t *testing.T) {
	v := "a" + strings.Repeat("é", MaxValue) // é is two bytes: byte MaxValue is inside one
	got := Quote(v)
	if !utf8.ValidString(got) {
		t.Fatalf("Quote cut a character in two: %q", got)
	}
	if !strings.HasSuffix(got, `… (257 bytes)`) {
		t.Errorf("Quote(%d bytes) = %q, want the length said", len(v), got)
	}
}

func TestBound(t *testing.T) {
	short := strings.Repeat("x", MaxMessage)
	if got := Bound(short); got != short {
		t.Errorf("Bound changed a message of %d bytes", len(short))
	}
	got := Bound(strings.Repeat("x", 40000))
	if len(got) > MaxMessage || !strings.HasSuffix(got, "(message of 40000 bytes cut)") {
		t.Errorf("Bound(40000 bytes) = %d bytes ending %q", len(got), got[len(got)-40:])
	}
}
