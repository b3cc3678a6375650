package meshd_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentmesh/agentmesh/shared/meshclient"
	"github.com/agentmesh/agentmesh/shared/meshd"
)

// silentTransport is an API that never answers: each request waits until
// its context ends.
type silentTransport struct{}

func (silentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// A stop while the first token exchange hangs ends Run within the grace
// the exchange is given after a stop, not after the exchange's whole
// timeout and retries. The bubble's clock makes this exact, under any load.
func TestAStopWhileTheAPIDoesNotAnswerEndsRunWithinTheTokenGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := meshclient.New("http://mesh.invalid", "amk_test", meshclient.WithHTTPClient(&http.Client{Transport: silentTransport{}}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- meshd.Run(ctx, meshd.Config{API: api, StateDir: t.TempDir(), Handler: newRecorder(), Mode: meshd.ModePoll,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		}()
		time.Sleep(2 * time.Second) // the bubble's clock: the exchange hangs meanwhile
		began := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil (stopped before any token)", err)
		}
		// The grace is 2 s (tokenStopGrace); the exchange's timeout is 15 s.
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("Run took %v after the stop, want at most the 2 s grace", took)
		}
	})
}
