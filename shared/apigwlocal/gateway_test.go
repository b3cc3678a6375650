package apigwlocal

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
	"github.com/agentmesh/agentmesh/shared/testenv"
)

// testGateway is a Gateway on an httptest server, with what it logged.
type testGateway struct {
	*Gateway
	url string
	log *testenv.Buffer
}

// serveGateway serves tpl with reg until the test ends. The gateway's
// shutdown runs before the server's close, which waits for every request:
// every $disconnect has run and every Function URL stream ended by then.
func serveGateway(t *testing.T, tpl *samtemplate.Template, reg Registry, opts WebSocketOptions) *testGateway {
	t.Helper()
	buf := &testenv.Buffer{}
	g, err := NewGateway(tpl, reg, opts, slog.New(slog.NewTextHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return &testGateway{Gateway: g, url: srv.URL, log: buf}
}
