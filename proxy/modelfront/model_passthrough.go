package modelfront

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// Requests the context manager does not fold. Other /v1/ paths are
// relayed, but a body among them may carry a conversation the model will
// read (Anthropic's message batches, OpenAI's completions, embeddings and
// conversations): every JSON body relayed under /v1/ has its strings
// scrubbed (modelwire.ScrubJSON) and a key twice in one object refused, as
// a folded request's. A compressed body is refused (foldproxy cannot
// scan it); a body that is not JSON (a file upload) goes as it is.

// modelPath is the path a request is routed by: cleaned, without a
// trailing slash ("/v1/messages/" is /v1/messages, as the APIs take it).
func modelPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean(p)
}

// readBody reads a request body within the front's bound, answering the
// error itself (and reporting false) when it cannot.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, dialect string) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			modelError(w, dialect, http.StatusRequestEntityTooLarge, "request_too_large",
				"request too large: foldproxy accepts model requests of at most %d bytes (foldproxy.model.maxRequestBytes)", h.maxBytes)
			return nil, false
		}
		modelError(w, dialect, http.StatusBadRequest, "invalid_request_error", "reading the request body: %v", err)
		return nil, false
	}
	return body, true
}

// dupKeyText is the error message for a body with a key twice in one
// object.
func dupKeyText(de *modelwire.DuplicateKeyError) string {
	return "the request body has the key " + strconv.Quote(de.Key) +
		" twice in one object: foldproxy refuses it, since it would scan one of the two values and the model API read the other; send each key once"
}

// scrubPassthrough scrubs the JSON body of a relayed request (see above)
// and puts it in r's place. It answers the error itself and reports false
// when the request cannot go on.
func (h *Handler) scrubPassthrough(w http.ResponseWriter, r *http.Request, ev *Event) bool {
	if r.Body == nil || r.Body == http.NoBody || !strings.HasPrefix(modelPath(r.URL.Path), "/v1/") {
		return true
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		modelError(w, ev.Dialect, http.StatusUnsupportedMediaType, "invalid_request_error",
			"foldproxy cannot read a request body with Content-Encoding %q: send it uncompressed", ce)
		return false
	}
	body, ok := h.readBody(w, r, ev.Dialect)
	if !ok {
		return false
	}
	out := body
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') && h.wire.Scrub != nil {
		var err error
		out, err = modelwire.ScrubJSON(r.Context(), body, h.wire.Scrub)
		var de *modelwire.DuplicateKeyError
		switch {
		case errors.As(err, &de):
			modelError(w, ev.Dialect, http.StatusBadRequest, "invalid_request_error", "%s", dupKeyText(de))
			return false
		case errors.Is(err, modelwire.ErrNotJSON):
			out = body // not JSON after all: the API answers it
		case err != nil:
			// Fail closed: nothing unscanned goes to the model API.
			ev.Outcome = OutcomeError
			h.log.Warn("model front: a relayed request could not be scanned for secrets; it was not forwarded", "path", r.URL.Path, "err", err)
			modelError(w, ev.Dialect, http.StatusInternalServerError, "api_error",
				"foldproxy could not scan the request for secrets, so it was not forwarded")
			return false
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return true
}
