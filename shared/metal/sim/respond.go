package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// reply is a successful answer: a status and a body to marshal (nil for
// none).
type reply struct {
	status int
	body   any
}

func ok(body any) (reply, error)      { return reply{http.StatusOK, body}, nil }
func created(body any) (reply, error) { return reply{http.StatusCreated, body}, nil }
func noContent() (reply, error)       { return reply{status: http.StatusNoContent}, nil }

// apiError is an error answer, written as the API's Error model.
type apiError struct {
	status   int
	messages []string
	// retryAfter is sent as Retry-After when positive.
	retryAfter time.Duration
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), strings.Join(e.messages, "; "))
}

func (e *apiError) body() metalv1.Error {
	return metalv1.Error{Errors: e.messages}
}

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, messages: []string{fmt.Sprintf(format, args...)}}
}

// unprocessable is the API's answer to a request that breaks a rule.
func unprocessable(err error) *apiError {
	return &apiError{status: http.StatusUnprocessableEntity, messages: []string{err.Error()}}
}

// errNotFound is the answer for a missing object, or one of a project the
// caller may not see: like the API, the simulator does not tell them apart.
var errNotFound = &apiError{status: http.StatusNotFound, messages: []string{"Not found"}}

// marshal renders a body as JSON. The answers are the SDK's model types, so
// what the SDK decodes is what it would have encoded.
func marshal(body any) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	return json.Marshal(body)
}

// writeBody writes an answer. The SDK refuses to decode a body that is not
// declared as JSON.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError writes an error answer.
func writeError(w http.ResponseWriter, e *apiError) {
	body, _ := marshal(e.body()) // a string slice always marshals
	setRetryAfter(w, e.retryAfter)
	writeBody(w, e.status, body)
}

// decode reads a JSON request body into v, usually an SDK input model whose
// UnmarshalJSON checks the required properties. Malformed JSON is a 400; a
// body the model refuses is a 422 with the reason.
func decode(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	if !json.Valid(data) {
		return errorf(http.StatusBadRequest, "the request body is not valid JSON")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errorf(http.StatusUnprocessableEntity, "invalid request: %v", err)
	}
	return nil
}

// includes is the set of nested objects a request asked to expand
// (?include=a,b).
type includes map[string]bool

func includesOf(r *http.Request) includes {
	inc := includes{}
	for _, v := range r.URL.Query()["include"] {
		for name := range strings.SplitSeq(v, ",") {
			inc[strings.TrimSpace(name)] = true
		}
	}
	return inc
}

// Pagination defaults of the Metal API.
const (
	defaultPerPage = 10
	maxPerPage     = 1000
)

// paginate cuts the page the request asks for (page, per_page) out of items
// and describes it the way the API's Meta does.
func paginate[T any](r *http.Request, items []T) ([]T, *metalv1.Meta, error) {
	page, err := positiveParam(r, "page", 1)
	if err != nil {
		return nil, nil, err
	}
	perPage, err := positiveParam(r, "per_page", defaultPerPage)
	if err != nil {
		return nil, nil, err
	}
	perPage = min(perPage, maxPerPage)
	total := len(items)
	lastPage := max(1, (total+perPage-1)/perPage)
	start, end := min((page-1)*perPage, total), min(page*perPage, total)

	pageRef := func(n int) *metalv1.Href {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(n))
		q.Set("per_page", strconv.Itoa(perPage))
		return &metalv1.Href{Href: (&url.URL{Path: r.URL.Path, RawQuery: q.Encode()}).String()}
	}
	meta := &metalv1.Meta{
		First:       pageRef(1),
		Last:        pageRef(lastPage),
		Self:        pageRef(page),
		Total:       metalv1.PtrInt32(int32(total)),
		CurrentPage: metalv1.PtrInt32(int32(page)),
		LastPage:    metalv1.PtrInt32(int32(lastPage)),
	}
	if page < lastPage {
		meta.Next = pageRef(page + 1)
	}
	if page > 1 {
		meta.Previous = pageRef(min(page-1, lastPage))
	}
	return items[start:end], meta, nil
}

func positiveParam(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errorf(http.StatusUnprocessableEntity, "%s must be a positive integer", name)
	}
	return n, nil
}
