package apigwlocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// Registry is what the local stack runs for each function of the template:
// the HTTP handler of every function with HttpApi events, the job of every
// function with Schedule events, the handler of every function behind a
// WebSocket API route and that of every function with a Function URL,
// keyed by logical ID.
type Registry struct {
	HTTP      map[string]httpapi.LambdaHandler
	Jobs      app.Jobs
	WebSocket map[string]WebSocketHandler
	// URL are the handlers of functions with a Function URL
	// (FunctionUrlConfig), by logical ID: what lambdaurl.Wrap returns.
	URL map[string]URLHandler
	// Replaced lists the template functions the local stack deliberately
	// does not run, with what runs instead (e.g. a deploy-time function
	// whose work the caller does itself before serving, or a function that
	// other functions invoke directly, such as the push relay).
	Replaced map[string]string
}

// Check reports, naming every function concerned, where reg and the template
// t disagree: a function with routes (HTTP or WebSocket) or a Function URL
// but no handler, a function with schedules but no job, or a handler or job
// for a function that has no such events. Replaced functions are not checked.
func (reg Registry) Check(t *samtemplate.Template) error {
	wantHTTP, wantJobs, wantWS, wantURL := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	wsRoutes := t.WebSocketFunctions()
	var problems []string
	for _, f := range t.Functions {
		if _, ok := reg.Replaced[f.LogicalID]; ok {
			continue
		}
		if len(f.Routes) > 0 {
			wantHTTP[f.LogicalID] = true
		}
		if len(f.Schedules) > 0 {
			wantJobs[f.LogicalID] = true
		}
		if len(wsRoutes[f.LogicalID]) > 0 {
			wantWS[f.LogicalID] = true
		}
		if f.URL != nil {
			wantURL[f.LogicalID] = true
		}
		if len(f.Routes) == 0 && len(f.Schedules) == 0 && len(wsRoutes[f.LogicalID]) == 0 && f.URL == nil {
			problems = append(problems, fmt.Sprintf("%s has neither an HttpApi nor a Schedule event nor a WebSocket route nor a Function URL, so the local stack cannot run it", f.LogicalID))
		}
	}
	// What is registered, true where it is not nil.
	handlers, jobs, wsHandlers, urlHandlers := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for id, h := range reg.HTTP {
		handlers[id] = h != nil
	}
	for id, h := range reg.WebSocket {
		wsHandlers[id] = h != nil
	}
	for id, j := range reg.Jobs {
		jobs[id] = j != nil
	}
	for id, h := range reg.URL {
		urlHandlers[id] = h != nil
	}
	missingHTTP, extraHTTP := compareIDs(wantHTTP, handlers)
	missingJobs, extraJobs := compareIDs(wantJobs, jobs)
	missingWS, extraWS := compareIDs(wantWS, wsHandlers)
	missingURL, extraURL := compareIDs(wantURL, urlHandlers)
	add := func(ids []string, what string) {
		if len(ids) > 0 {
			sort.Strings(ids)
			problems = append(problems, what+": "+strings.Join(ids, ", "))
		}
	}
	add(missingHTTP, "no HTTP handler registered for")
	add(extraHTTP, "HTTP handler registered for a function without HttpApi events in template.yaml")
	add(missingJobs, "no scheduled job registered for")
	add(extraJobs, "scheduled job registered for a function without Schedule events in template.yaml")
	add(missingWS, "no WebSocket handler registered for")
	add(extraWS, "WebSocket handler registered for a function no WebSocket route of template.yaml invokes")
	add(missingURL, "no Function URL handler registered for")
	add(extraURL, "Function URL handler registered for a function without FunctionUrlConfig in template.yaml")
	if len(problems) > 0 {
		return fmt.Errorf("the local registry does not match template.yaml: %s", strings.Join(problems, "; "))
	}
	return nil
}

// compareIDs lists the ids wanted that are not registered (true in
// registered), and the registered ids that are not wanted.
func compareIDs(want, registered map[string]bool) (missing, extra []string) {
	for id := range want {
		if !registered[id] {
			missing = append(missing, id)
		}
	}
	for id := range registered {
		if !want[id] {
			extra = append(extra, id)
		}
	}
	return missing, extra
}

// Stack serves a template's routes and fires its schedules.
type Stack struct {
	Template *samtemplate.Template
	Registry Registry
	Log      *slog.Logger
	// Partial starts even when handlers are missing: their routes answer 501
	// and their schedules do not fire. For work in progress only.
	Partial bool
	// OnScheduledRun, if set, is told about every scheduled run.
	OnScheduledRun func(function string, took time.Duration, err error)
	// WebSocket sets the WebSocket APIs' limits; the zero value is AWS's.
	WebSocket WebSocketOptions

	invOnce sync.Once
	inv     *Invocations
}

// Invocations returns how many times each function was invoked so far (by
// its routes or its schedules), by logical ID.
func (s *Stack) Invocations() map[string]int64 { return s.invocations().Snapshot() }

func (s *Stack) invocations() *Invocations {
	s.invOnce.Do(func() { s.inv = NewInvocations() })
	return s.inv
}

// Serve serves HTTP on ln and runs the schedules until ctx is done, then shuts
// down gracefully: no new connections, in-flight requests get a few seconds
// to finish, and it returns only after every scheduled run has returned.
func (s *Stack) Serve(ctx context.Context, ln net.Listener) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := s.Registry.Check(s.Template); err != nil {
		if !s.Partial {
			ln.Close()
			return err
		}
		log.Warn("starting a partial local stack", "err", err)
	}
	gw, err := newGateway(s.Template, s.Registry, s.WebSocket, log, s.invocations())
	if err != nil {
		ln.Close()
		return err
	}
	// Requests run under baseCtx, which is cancelled only when a graceful
	// shutdown takes too long (long polls of GET /v1/inbox wait up to 20 s).
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs := &http.Server{
		Handler:           gw,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	schedCtx, stopSchedules := context.WithCancel(ctx)
	defer stopSchedules()
	schedules := s.startSchedules(schedCtx, log)

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err = <-served:
		// The listener failed on its own; stop the schedules too.
	case <-ctx.Done():
		// The WebSocket connections are hijacked, out of hs's sight: they
		// are closed (and their $disconnect run) alongside.
		var wg sync.WaitGroup
		wg.Go(func() {
			wsCtx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			if err := gw.Shutdown(wsCtx); err != nil {
				log.Warn("WebSocket shutdown", "err", err)
			}
		})
		shutdown(hs, cancelBase)
		wg.Wait()
		<-served
		err = nil
	}
	stopSchedules()
	schedules.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// startSchedules starts one runSchedule per Schedule of every function that
// has a job; the returned group is done once ctx is done and every run has
// returned.
func (s *Stack) startSchedules(ctx context.Context, log *slog.Logger) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, f := range s.Template.Functions {
		job := s.Registry.Jobs[f.LogicalID]
		if job == nil {
			continue
		}
		for _, sch := range f.Schedules {
			wg.Go(func() { s.runSchedule(ctx, log, f, sch, job) })
		}
	}
	return &wg
}

// shutdown stops hs gracefully: 3 s for in-flight requests to finish on
// their own, then their contexts are cancelled (cancelBase) and they get 5 s
// more before the connections are closed.
func shutdown(hs *http.Server, cancelBase context.CancelFunc) {
	shCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := hs.Shutdown(shCtx)
	cancel()
	if err == nil {
		return
	}
	cancelBase()
	shCtx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shCtx); err != nil {
		_ = hs.Close()
	}
}

// runSchedule fires job once now and then every sch.Every, like an
// EventBridge rule invoking a Lambda function: each run gets the function's
// timeout as its deadline, and a run that outlasts the period overlaps the
// next one instead of delaying it (the DispatcherFunction relies on this:
// its runs overlap so that delivery never pauses). Runs that ignore their
// deadline cannot pile up: at most timeout/period + 1 run at once, and a tick
// that finds that many still running is skipped with a warning. It returns
// once ctx is done and every run has returned.
func (s *Stack) runSchedule(ctx context.Context, log *slog.Logger, f samtemplate.Function, sch samtemplate.Schedule, job app.Job) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = sch.Every
	}
	limit := int(timeout/sch.Every) + 1
	var running sync.WaitGroup
	defer running.Wait()
	slots := make(chan struct{}, limit)
	run := func() {
		defer func() { <-slots }()
		defer running.Done()
		runCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		s.invocations().Add(f.LogicalID)
		start := time.Now()
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("job panicked: %v", p)
				}
			}()
			return job(runCtx)
		}()
		took := time.Since(start)
		if err != nil && ctx.Err() == nil {
			log.Error("scheduled run failed", "function", f.LogicalID, "schedule", sch.Expr, "took", took, "err", err)
		} else {
			log.Info("scheduled run", "function", f.LogicalID, "schedule", sch.Expr, "took", took)
		}
		if s.OnScheduledRun != nil {
			s.OnScheduledRun(f.LogicalID, took, err)
		}
	}
	fire := func() {
		select {
		case slots <- struct{}{}:
			running.Add(1)
			go run()
		default:
			log.Warn("scheduled run skipped: earlier runs are still running past their timeout", "function", f.LogicalID, "schedule", sch.Expr, "running", limit)
		}
	}
	// The ticker starts with the first run, so the rate is kept from the
	// start as EventBridge keeps it, whatever each run takes.
	t := time.NewTicker(sch.Every)
	defer t.Stop()
	fire()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fire()
		}
	}
}
