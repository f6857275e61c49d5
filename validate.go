package runclaim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"unicode"
	"unicode/utf8"
)

// ValidateSource reports whether source can be claimed: it must be valid
// UTF-8, between 1 and MaxSourceLen bytes, and free of NUL bytes and other
// control characters. The error wraps ErrInvalidSource. Stores call it before
// they send anything.
func ValidateSource(source string) error {
	if err := validateName(source, MaxSourceLen); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSource, err)
	}
	return nil
}

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

func checkContext(ctx context.Context) error {
	if ctx == nil {
		return errors.New("runclaim: nil context")
	}
	return nil
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
