// Package message keeps the values users give out of condition messages and
// rejections at a bounded length: the API server refuses a condition message
// over 32768 characters, and a status write it refuses leaves the object with
// no word at all about what went wrong.
package message

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

const (
	// MaxValue is how many bytes of one value a message repeats.
	MaxValue = 128
	// MaxMessage bounds a whole message; it leaves room under the API
	// server's limit for every value a message may quote.
	MaxMessage = 8192
)

// Quote returns v quoted as Go quotes strings, cut to MaxValue bytes (on a
// character boundary) with its full length said when it is longer, e.g.
// "10.0.0.5aaaa…" (40000 bytes).
func Quote(v string) string {
	if len(v) <= MaxValue {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(cut(v, MaxValue)), len(v))
}

// Bound cuts a whole message to MaxMessage bytes, saying how long it was.
func Bound(m string) string {
	if len(m) <= MaxMessage {
		return m
	}
	return fmt.Sprintf("%s… (message of %d bytes cut)", cut(m, MaxMessage-64), len(m))
}

// cut returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func cut(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
