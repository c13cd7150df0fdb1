package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ErrorCode is the stable code of an ErrorBody. Clients act on it; the
// message is for people. ErrorCode implements error, so a code is its own
// sentinel: errors.Is(err, CodeBusy) holds for any *Error with that code.
type ErrorCode string

// The codes a hub answers. A client that meets a code it does not know
// treats it by its HTTP status.
const (
	// CodeBadRequest: the body, a path parameter or a header cannot be
	// parsed or is not valid (a name outside the allowed set, an
	// extension that refused the payload at admit).
	CodeBadRequest ErrorCode = "bad_request"
	// CodePayloadTooLarge: the body is longer than the route accepts.
	CodePayloadTooLarge ErrorCode = "payload_too_large"
	// CodeUnauthorized: the credential is missing, forged, or no longer
	// the registration's (a later registration rotated it).
	CodeUnauthorized ErrorCode = "unauthorized"
	// CodeNotFound: no such instance, peer or service, or no such route.
	CodeNotFound ErrorCode = "not_found"
	// CodeMethodNotAllowed: the path exists, the method does not.
	CodeMethodNotAllowed ErrorCode = "method_not_allowed"
	// CodeBusy: a registration or a removal of this instance is in
	// progress (409), or the registration lock was not free within
	// lock_timeout_ms (503). Retry.
	CodeBusy ErrorCode = "busy"
	// CodeRegisterAgain: the hub removed the registration (a failure after
	// its store write). Register again without a credential.
	CodeRegisterAgain ErrorCode = "register_again"
	// CodeRecovered: the hub restarted and holds the registration
	// reserved. Register again presenting the credential.
	CodeRecovered ErrorCode = "recovered"
	// CodeUnavailable: the hub cannot serve the call now: a step timed
	// out, the store is not Live, or the hub is shutting down.
	CodeUnavailable ErrorCode = "unavailable"
	// CodeInternal: a bug or a panic in the hub or an extension.
	CodeInternal ErrorCode = "internal"
)

// Error makes a code usable as an errors.Is target.
func (c ErrorCode) Error() string { return "velo hub: " + string(c) }

// Status is the HTTP status a hub answers with the code.
func (c ErrorCode) Status() int {
	switch c {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeBusy, CodeRegisterAgain, CodeRecovered:
		return http.StatusConflict
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the JSON body of every error answer of a core route.
type ErrorBody struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

// Error is an error answer: the body and the HTTP status it came with.
type Error struct {
	// Status is the HTTP status; zero means Code.Status().
	Status  int
	Code    ErrorCode
	Message string
}

// Errorf builds an Error with code's status.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Status: code.Status(), Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequestf(format string, args ...any) *Error { return Errorf(CodeBadRequest, format, args...) }

func (e *Error) Error() string {
	if e.Message == "" {
		return "velo hub: " + string(e.Code)
	}
	return "velo hub: " + string(e.Code) + ": " + e.Message
}

// Is matches an ErrorCode, or an *Error, with the same code.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case ErrorCode:
		return e.Code == t
	case *Error:
		return t != nil && e.Code == t.Code
	}
	return false
}

// HTTPStatus is Status, or the code's status when Status is zero.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	return e.Code.Status()
}

// Body is the ErrorBody to answer with.
func (e *Error) Body() ErrorBody { return ErrorBody{Code: e.Code, Message: e.Message} }

// WriteError answers err on w as an ErrorBody. An error that is not an
// *Error answers CodeInternal, with a message that does not leak err.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeInternal, Message: "internal error"}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.HTTPStatus())
	_ = json.NewEncoder(w).Encode(e.Body())
}

// ParseError turns an error answer into an *Error. A body that is not an
// ErrorBody (a proxy's page) gives an Error with the status and an empty
// code, so errors.Is matches no code and the caller reads Status.
func ParseError(status int, body []byte) *Error {
	var b ErrorBody
	if err := json.Unmarshal(body, &b); err != nil || b.Code == "" {
		return &Error{Status: status, Message: http.StatusText(status)}
	}
	return &Error{Status: status, Code: b.Code, Message: b.Message}
}
