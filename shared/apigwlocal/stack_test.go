package apigwlocal

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/httpapi"
	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

func okHandler(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"status":"ok"}`}, nil
}

func wsOK(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

func TestCheckNamesEveryMismatchBetweenRegistryAndTemplate(t *testing.T) {
	tpl := &samtemplate.Template{Functions: []samtemplate.Function{
		{LogicalID: "HealthFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/health"}}},
		{LogicalID: "InboxFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/inbox"}}},
		{LogicalID: "TickFunction", Schedules: []samtemplate.Schedule{{Expr: "rate(1 minute)", Every: time.Minute}}},
		{LogicalID: "MigrateFunction"},
		{LogicalID: "PushConnectFunction"},
	}, WebSocketAPIs: []samtemplate.WebSocketAPI{{LogicalID: "PushApi", Stage: "push", Routes: map[string]string{"$connect": "PushConnectFunction"}}}}
	job := func(context.Context) error { return nil }
	ws := map[string]WebSocketHandler{"PushConnectFunction": wsOK}
	replaced := map[string]string{"MigrateFunction": "the caller migrates before serving"}
	tests := []struct {
		name    string
		reg     Registry
		wantErr []string
	}{
		{"a registry covering exactly the template passes (MigrateFunction is replaced)",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}, WebSocket: ws, Replaced: replaced}, nil},
		{"a function behind a WebSocket route without a handler is named",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}, Replaced: replaced},
			[]string{"no WebSocket handler registered for: PushConnectFunction"}},
		{"a WebSocket handler for a function no route invokes is named",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}, Replaced: replaced,
				WebSocket: map[string]WebSocketHandler{"PushConnectFunction": wsOK, "HealthFunction": wsOK}},
			[]string{"WebSocket handler registered for a function no WebSocket route of template.yaml invokes: HealthFunction"}},
		{"a function with neither routes nor schedules is named unless the registry replaces it",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}},
			[]string{"MigrateFunction has neither an HttpApi nor a Schedule event nor a WebSocket route"}},
		{"a missing handler is named",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}},
			[]string{"no HTTP handler registered for: InboxFunction"}},
		{"a handler for a function the template lacks is named",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler, "OldFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}},
			[]string{"without HttpApi events in template.yaml: OldFunction"}},
		{"a missing job and an extra job are both named",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"InboxFunction": job}},
			[]string{"no scheduled job registered for: TickFunction", "without Schedule events in template.yaml: InboxFunction"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.reg.Check(tpl)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check passed")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestStackRefusesToStartWithAnIncompleteRegistry(t *testing.T) {
	tpl := &samtemplate.Template{Functions: []samtemplate.Function{{LogicalID: "HealthFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/health"}}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{Template: tpl, Registry: Registry{}}
	err = s.Serve(context.Background(), ln)
	if err == nil || !strings.Contains(err.Error(), "HealthFunction") {
		t.Fatalf("Serve = %v, want an error naming HealthFunction", err)
	}
}

// A schedule fires at start, then at its rate, like EventBridge invoking a
// Lambda function: a run that outlasts the period overlaps the next instead
// of delaying it, each run has the function's timeout as its deadline, and
// runSchedule returns only once every run has returned.
func TestAScheduleFiresAtStartThenOnEveryTickWithOverlappingRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = time.Minute
		f := samtemplate.Function{LogicalID: "SlowFunction", Timeout: 3 * every}
		sch := samtemplate.Schedule{Expr: "rate(1 minute)", Every: every}
		var mu sync.Mutex
		var starts, deadlines []time.Duration
		var running, maxRunning, finished int
		t0 := time.Now()
		slow := func(ctx context.Context) error {
			dl, ok := ctx.Deadline()
			mu.Lock()
			starts = append(starts, time.Since(t0))
			if ok {
				deadlines = append(deadlines, dl.Sub(t0))
			}
			running++
			maxRunning = max(maxRunning, running)
			mu.Unlock()
			// Every run outlasts the period by half.
			select {
			case <-time.After(every * 3 / 2):
			case <-ctx.Done():
			}
			mu.Lock()
			running--
			finished++
			mu.Unlock()
			return nil
		}
		var reported atomic.Int32
		s := &Stack{OnScheduledRun: func(string, time.Duration, error) { reported.Add(1) }}
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan struct{})
		go func() {
			s.runSchedule(ctx, slog.New(slog.DiscardHandler), f, sch, slow)
			close(returned)
		}()
		// The bubble's clock moves only when every goroutine waits, so the
		// runs start exactly on the ticks.
		time.Sleep(10*every + every/4)
		cancel()
		<-returned

		mu.Lock()
		defer mu.Unlock()
		var wantStarts, wantDeadlines []time.Duration
		for i := range 11 {
			wantStarts = append(wantStarts, time.Duration(i)*every)
			wantDeadlines = append(wantDeadlines, time.Duration(i)*every+f.Timeout)
		}
		if !reflect.DeepEqual(starts, wantStarts) {
			t.Errorf("runs started at %v, want one at start and then one per tick: %v", starts, wantStarts)
		}
		if !reflect.DeepEqual(deadlines, wantDeadlines) {
			t.Errorf("run deadlines %v, want each start plus the function's timeout: %v", deadlines, wantDeadlines)
		}
		if maxRunning != 2 {
			t.Errorf("at most %d runs at once, want 2: each run outlasts the period by half and overlaps the next", maxRunning)
		}
		if running != 0 || finished != len(starts) {
			t.Errorf("runSchedule returned with a run in progress (%d running, %d/%d finished)", running, finished, len(starts))
		}
		if int(reported.Load()) != len(starts) {
			t.Errorf("OnScheduledRun told about %d of %d runs", reported.Load(), len(starts))
		}
	})
}

// Runs that ignore their deadline cannot pile up: a tick that finds
// timeout/period + 1 runs still going is skipped.
func TestATickIsSkippedWhileTooManyRunsIgnoreTheirDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = time.Minute
		f := samtemplate.Function{LogicalID: "StuckFunction", Timeout: every}
		sch := samtemplate.Schedule{Expr: "rate(1 minute)", Every: every}
		release := make(chan struct{})
		var started atomic.Int32
		stuck := func(context.Context) error {
			started.Add(1)
			<-release // ignores ctx
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan struct{})
		go func() {
			(&Stack{}).runSchedule(ctx, slog.New(slog.DiscardHandler), f, sch, stuck)
			close(returned)
		}()
		time.Sleep(5*every + every/4)
		if n := started.Load(); n != 2 {
			t.Errorf("%d stuck runs after 5 ticks, want 2 (timeout/period + 1)", n)
		}
		cancel()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("runSchedule returned while runs were still going")
		default:
		}
		close(release)
		<-returned
	})
}

// Serve serves the routes and fires the schedules at once; on shutdown it
// waits for the runs in progress and serves no more requests.
func TestStackServesAndFiresSchedulesThenShutsDownCleanly(t *testing.T) {
	tpl := &samtemplate.Template{Functions: []samtemplate.Function{
		{LogicalID: "HealthFunction", Timeout: 3 * time.Second, Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/health"}}},
		// An hour's period: the one run the test sees is the one at start.
		{LogicalID: "SlowFunction", Timeout: 2 * time.Hour, Schedules: []samtemplate.Schedule{{Expr: "rate(1 hour)", Every: time.Hour}}},
	}}
	firstRun := make(chan struct{})
	var finished atomic.Int32
	slow := func(ctx context.Context) error {
		close(firstRun)
		<-ctx.Done()
		finished.Add(1)
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{
		Template: tpl,
		Registry: Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler}, Jobs: app.Jobs{"SlowFunction": slow}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	url := "http://" + ln.Addr().String() + "/v1/health"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/health = %d", resp.StatusCode)
	}
	select {
	case <-firstRun:
	case <-time.After(10 * time.Second):
		t.Fatal("the schedule did not fire at start (its next tick is an hour away)")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of the cancel")
	}
	if finished.Load() != 1 {
		t.Error("Serve returned before the run in progress did")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

// idleListener accepts no connection until it is closed, so that Serve can
// run inside a synctest bubble, where real network waits would stop the clock.
type idleListener struct {
	closed chan struct{}
	once   sync.Once
}

func (l *idleListener) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l *idleListener) Close() error              { l.once.Do(func() { close(l.closed) }); return nil }
func (l *idleListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func TestServeReturnsOnlyAfterTheScheduledRunsInProgressHaveReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tpl := &samtemplate.Template{Functions: []samtemplate.Function{
			{LogicalID: "SlowFunction", Timeout: 2 * time.Hour, Schedules: []samtemplate.Schedule{{Expr: "rate(1 hour)", Every: time.Hour}}},
		}}
		release := make(chan struct{})
		var finished atomic.Bool
		slow := func(ctx context.Context) error {
			<-ctx.Done()
			<-release // a run that takes its time to wind down
			finished.Store(true)
			return nil
		}
		s := &Stack{Template: tpl, Registry: Registry{Jobs: app.Jobs{"SlowFunction": slow}}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, &idleListener{closed: make(chan struct{})}) }()
		synctest.Wait()
		cancel()
		// Every goroutine of the bubble now waits: Serve can only be
		// waiting for the run.
		synctest.Wait()
		select {
		case err := <-done:
			t.Errorf("Serve returned (%v) while a scheduled run was still winding down", err)
			close(release) // lets the run end, so the bubble can
			return
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Serve = %v", err)
		}
		if !finished.Load() {
			t.Error("Serve returned before the run did")
		}
	})
}
