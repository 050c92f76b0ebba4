package adminapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/gpud/gpud/internal/fileio"
)

// ReadJSON decodes a request body of at most [fileio.MaxBodyBytes] into v
// strictly: one JSON value, no unknown fields, nothing after it. Errors
// wrap ErrBadBody (and *http.MaxBytesError for a body too large) and say
// what is wrong in terms of the request, with the byte offset.
func ReadJSON(r *http.Request, v any) error {
	return decodeBody(http.MaxBytesReader(nil, r.Body, fileio.MaxBodyBytes), v)
}

// DecodeJSON is [ReadJSON] for a handler: on error it has already written
// the JSON error response (413 "too_large" for a body over the limit, 400
// "bad_request" otherwise) and the handler just returns.
func DecodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	err := decodeBody(http.MaxBytesReader(w, r.Body, fileio.MaxBodyBytes), v)
	if err == nil {
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		WriteError(w, http.StatusRequestEntityTooLarge, "too_large", err)
	} else {
		WriteError(w, http.StatusBadRequest, "bad_request", err)
	}
	return err
}

func decodeBody(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadBody, describe(err, dec.InputOffset()))
	}
	// One value only: a second one, or garbage, is an error.
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return fmt.Errorf("%w: unexpected data after the JSON value at byte %d: send one JSON object", ErrBadBody, dec.InputOffset()-int64(len(extra)))
	default:
		return fmt.Errorf("%w: %w", ErrBadBody, describe(err, dec.InputOffset()))
	}
}

// describe turns an encoding/json error into a message about the request.
// The error is kept (wrapped) for *http.MaxBytesError.
func describe(err error, offset int64) error {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		tooLarge  *http.MaxBytesError
		unmarshal *json.InvalidUnmarshalError
	)
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("body larger than %d bytes: %w", tooLarge.Limit, err)
	case errors.Is(err, io.EOF):
		return errors.New("empty body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("JSON ends early at byte %d", offset)
	case errors.As(err, &syntax):
		return fmt.Errorf("invalid JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "the body"
		}
		return fmt.Errorf("%s at byte %d: got a JSON %s, want %s", field, typeErr.Offset, typeErr.Value, typeName(typeErr.Type))
	case errors.As(err, &unmarshal):
		return err // a programming error in the handler, not the request
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("%s at byte %d: check the field names", strings.TrimPrefix(err.Error(), "json: "), offset)
	}
	return err
}

// typeName says a Go type in JSON terms.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number (" + t.Kind().String() + ")"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + t.String()
}
