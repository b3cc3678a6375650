package app

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Job is one scheduled unit of work (dispatcher, scanners, janitor).
type Job func(ctx context.Context) error

// Jobs maps a template function's logical ID to its job, like
// httpapi.Endpoints does for routes.
type Jobs map[string]Job

// Must returns the job named name or panics at init.
func (j Jobs) Must(name string) Job {
	job, ok := j[name]
	if !ok || job == nil {
		panic("app: no job named " + name)
	}
	return job
}

// Scheduled adapts a job to an EventBridge-scheduled Lambda handler with one
// log line per run. An error makes the invocation fail (visible in the
// function's Errors metric); the next schedule tick retries.
func (e *Env) Scheduled(name string, job Job) func(ctx context.Context, ev events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		start := time.Now()
		err := job(ctx)
		if err != nil {
			e.Log.Error("scheduled run failed", "job", name, "took", time.Since(start), "err", err)
			return fmt.Errorf("%s: %w", name, err)
		}
		e.Log.Info("scheduled run", "job", name, "took", time.Since(start))
		return nil
	}
}
