package a2agw

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/errordetails"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

// notFound is the one TaskNotFound every "no such task" and every refused
// caller answers, so they cannot be told apart. A fresh value per call: a2a
// errors are mutable.
func notFound() error { return a2a.NewError(a2a.ErrTaskNotFound, "task not found") }

// edgeError is an answer the gateway's front gives before a2a-go sees the
// request (authentication, rate, bad input), in either binding's form.
type edgeError struct {
	status     int   // HTTP status
	kind       error // the a2a sentinel: its JSON-RPC code and reason
	msg        string
	retryAfter int // seconds; sent as Retry-After when > 0
}

// The wire codes of the sentinels the front answers with, as a2a-go's
// transports map them (internal/jsonrpc and internal/rest, which are not
// importable).
var (
	rpcCodes = map[error]int{
		a2a.ErrParseError:             -32700,
		a2a.ErrInvalidRequest:         -32600,
		a2a.ErrMethodNotFound:         -32601,
		a2a.ErrInvalidParams:          -32602,
		a2a.ErrInternalError:          -32603,
		a2a.ErrServerError:            -32000,
		a2a.ErrUnsupportedContentType: -32005,
		a2a.ErrVersionNotSupported:    -32009,
		a2a.ErrUnauthenticated:        -31401,
	}
	// grpcStatus is the status word of the REST binding's error body
	// (google.rpc.Status), by HTTP status.
	grpcStatus = map[int]string{
		http.StatusBadRequest:            "INVALID_ARGUMENT",
		http.StatusUnauthorized:          "UNAUTHENTICATED",
		http.StatusNotFound:              "NOT_FOUND",
		http.StatusMethodNotAllowed:      "UNIMPLEMENTED",
		http.StatusRequestEntityTooLarge: "INVALID_ARGUMENT",
		http.StatusUnsupportedMediaType:  "INVALID_ARGUMENT",
		http.StatusTooManyRequests:       "RESOURCE_EXHAUSTED",
		http.StatusInternalServerError:   "INTERNAL",
	}
)

func errorInfo(kind error) *errordetails.Typed {
	return errordetails.NewErrorInfo(a2a.ErrorReason(kind), a2a.ProtocolDomain, nil)
}

// writeRPC answers e as a JSON-RPC 2.0 error response with id (nil: null).
func writeRPC(w http.ResponseWriter, id any, e edgeError) {
	writeJSON(w, e, rpcBody(id, e))
}

// rpcBody is the JSON-RPC 2.0 error response of e with id.
func rpcBody(id any, e edgeError) any {
	type rpcError struct {
		Code    int                   `json:"code"`
		Message string                `json:"message"`
		Data    []*errordetails.Typed `json:"data,omitempty"`
	}
	body := struct {
		JSONRPC string   `json:"jsonrpc"`
		ID      any      `json:"id"`
		Error   rpcError `json:"error"`
	}{"2.0", id, rpcError{Code: rpcCodes[e.kind], Message: e.msg, Data: []*errordetails.Typed{errorInfo(e.kind)}}}
	return body
}

// restWords are the google.rpc.Status words of the front's errors whose
// word is not the one of their HTTP status, as a2a-go's REST binding
// answers them.
var restWords = map[error]string{a2a.ErrVersionNotSupported: "FAILED_PRECONDITION"}

// writeREST answers e in the HTTP+JSON binding's error form (AIP-193).
// Errors that JSON-RPC carries with HTTP 200 are a 400 here.
func writeREST(w http.ResponseWriter, e edgeError) {
	if e.status < 400 {
		e.status = http.StatusBadRequest
	}
	word := grpcStatus[e.status]
	if wd, ok := restWords[e.kind]; ok {
		word = wd
	}
	type status struct {
		Code    int                   `json:"code"`
		Status  string                `json:"status"`
		Message string                `json:"message"`
		Details []*errordetails.Typed `json:"details"`
	}
	body := struct {
		Error status `json:"error"`
	}{status{Code: e.status, Status: word, Message: e.msg, Details: []*errordetails.Typed{errorInfo(e.kind)}}}
	writeJSON(w, e, body)
}

func writeJSON(w http.ResponseWriter, e edgeError, body any) {
	b, _ := json.Marshal(body) // plain strings and numbers: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="agentmesh"`)
	}
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(append(b, '\n'))
}

// fromMesh turns a mesh error met at the front (authentication, the rate
// budget, a database failure) into the front's answer. Internal failures
// are logged, never shown.
func fromMesh(ctx context.Context, log *slog.Logger, err error) edgeError {
	me := mesh.AsError(err)
	switch me.Kind {
	case mesh.KindUnauthorized:
		return edgeError{status: http.StatusUnauthorized, kind: a2a.ErrUnauthenticated, msg: "a valid mesh agent token is required (Authorization: Bearer <token>)"}
	case mesh.KindRateLimited:
		return rateLimited(me)
	}
	log.ErrorContext(ctx, "a2a gateway: internal error", "err", err)
	return edgeError{status: http.StatusInternalServerError, kind: a2a.ErrInternalError, msg: "internal error"}
}

// rateLimited is the one answer to a spent rate budget, met at the front
// or inside a write's own transaction: 429 with Retry-After, the JSON-RPC
// server error -32000 or RESOURCE_EXHAUSTED over HTTP+JSON.
func rateLimited(me *mesh.Error) edgeError {
	return edgeError{status: http.StatusTooManyRequests, kind: a2a.ErrServerError, msg: "rate limited: " + me.Message, retryAfter: max(me.RetryAfter, 1)}
}

// toA2A maps a mesh error of a method to the A2A error its transport
// answers: the one place mesh codes become A2A codes. A rate limit is
// noted in h.limited, and the response writer answers it as the front
// does (rateLimited), whatever a2a-go makes of the error returned here.
func (h *meshHandler) toA2A(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ae *a2a.Error
	if errors.As(err, &ae) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return a2a.NewError(a2a.ErrInternalError, "the request ended before it was answered")
	}
	me := mesh.AsError(err)
	switch me.Kind {
	case mesh.KindNotFound, mesh.KindForbidden:
		// Forbidden is not_reachable: a task or agent the caller may not see.
		return notFound()
	case mesh.KindInvalid, mesh.KindUnprocessable, mesh.KindTooLarge:
		return a2a.NewError(a2a.ErrInvalidParams, me.Code+": "+me.Message)
	case mesh.KindConflict:
		if me.Code == "task_terminal" {
			return a2a.NewError(a2a.ErrUnsupportedOperation, "the task is in a terminal state and takes no more messages")
		}
		return a2a.NewError(a2a.ErrInvalidParams, me.Code+": "+me.Message)
	case mesh.KindRateLimited:
		e := rateLimited(me)
		h.limited.Store(&e)
		return a2a.NewError(a2a.ErrServerError, e.msg)
	case mesh.KindUnauthorized:
		return a2a.NewError(a2a.ErrUnauthenticated, "the caller's credentials are no longer valid")
	case mesh.KindUnavailable:
		return a2a.NewError(a2a.ErrInternalError, "a dependency is unavailable; retry later")
	}
	h.g.log().ErrorContext(ctx, "a2a gateway: internal error", "err", err)
	return a2a.NewError(a2a.ErrInternalError, "internal error")
}
