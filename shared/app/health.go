package app

import (
	"context"
	"net/http"
	"time"

	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/mesh"
)

// Endpoints returns the endpoints app itself provides.
func (e *Env) Endpoints() httpapi.Endpoints {
	return httpapi.Endpoints{"HealthFunction": e.healthEndpoint()}
}

// healthEndpoint answers liveness with a database round trip, so a function
// that cannot reach its database reports 503 instead of "ok".
func (e *Env) healthEndpoint() httpapi.Endpoint {
	return httpapi.Endpoint{Auth: httpapi.AuthPublic, Handle: func(ctx context.Context, _ *httpapi.Request) (httpapi.Response, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := e.DB.PingContext(ctx); err != nil {
			return httpapi.Response{}, &mesh.Error{Kind: mesh.KindUnavailable, Code: "database_unavailable", Message: "the database does not answer", Err: err}
		}
		return httpapi.JSON(http.StatusOK, map[string]string{"status": "ok"}), nil
	}}
}
