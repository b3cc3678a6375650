package localstack

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/agentmesh/agentmesh/shared/app"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/httpapi"
)

func okHandler(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"status":"ok"}`}, nil
}

func TestCheckNamesEveryMismatchBetweenRegistryAndTemplate(t *testing.T) {
	tpl := &Template{Functions: []Function{
		{LogicalID: "HealthFunction", Routes: []Route{{"GET", "/v1/health"}}},
		{LogicalID: "InboxFunction", Routes: []Route{{"GET", "/v1/inbox"}}},
		{LogicalID: "TickFunction", Schedules: []Schedule{{"rate(1 minute)", time.Minute}}},
		{LogicalID: "MigrateFunction"},
	}}
	job := func(context.Context) error { return nil }
	tests := []struct {
		name    string
		reg     Registry
		wantErr []string
	}{
		{"a registry covering exactly the template passes (MigrateFunction is replaced)",
			Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler, "InboxFunction": okHandler}, Jobs: app.Jobs{"TickFunction": job}}, nil},
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
			err := tpl.Check(tt.reg)
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
	tpl := &Template{Functions: []Function{{LogicalID: "HealthFunction", Routes: []Route{{"GET", "/v1/health"}}}}}
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
// Lambda function: a run that outlasts the period overlaps the next instead of
// delaying it, each run has the function's timeout as its deadline; shutdown
// waits for the runs in progress and serves no more requests.
func TestStackServesAndFiresSchedulesThenShutsDownCleanly(t *testing.T) {
	// Long enough that timer jitter on a loaded machine (tens of ms) cannot
	// turn a 1.5-period run into a third overlapping one.
	const every = 200 * time.Millisecond
	tpl := &Template{Functions: []Function{
		{LogicalID: "HealthFunction", Timeout: 3 * time.Second, Routes: []Route{{"GET", "/v1/health"}}},
		{LogicalID: "SlowFunction", Timeout: 3 * time.Second, Schedules: []Schedule{{"rate(1 minute)", every}}},
	}}
	var runs, running, maxRunning, finished atomic.Int32
	var mu sync.Mutex
	var starts []time.Time
	slow := func(ctx context.Context) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		runs.Add(1)
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		defer running.Add(-1)
		// Every run outlasts the period; the deadline is the function's timeout.
		if _, ok := ctx.Deadline(); !ok {
			t.Error("scheduled run has no deadline")
		}
		select {
		case <-time.After(every * 3 / 2):
		case <-ctx.Done():
		}
		finished.Add(1)
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reported atomic.Int32
	s := &Stack{
		Template:       tpl,
		Registry:       Registry{HTTP: map[string]httpapi.LambdaHandler{"HealthFunction": okHandler}, Jobs: app.Jobs{"SlowFunction": slow}},
		OnScheduledRun: func(string, time.Duration, error) { reported.Add(1) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
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
	time.Sleep(10 * every)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}

	// Runs start on the ticks, not after the previous run: about 10 in 10
	// periods, where runs waiting for each other would manage 7.
	if n := runs.Load(); n < 9 {
		t.Errorf("%d runs in %v, want one at start and then one per period", n, 10*every)
	}
	mu.Lock()
	if first := starts[0].Sub(start); first > every/2 {
		t.Errorf("first run started %v after Serve, want at once", first)
	}
	mu.Unlock()
	if m := maxRunning.Load(); m != 2 {
		t.Errorf("at most %d runs at once, want 2: each run outlasts the period by half and overlaps the next", m)
	}
	if running.Load() != 0 || finished.Load() != runs.Load() {
		t.Errorf("Serve returned with a run in progress (%d running, %d/%d finished)", running.Load(), finished.Load(), runs.Load())
	}
	if reported.Load() != runs.Load() {
		t.Errorf("OnScheduledRun told about %d of %d runs", reported.Load(), runs.Load())
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

// On AWS and here alike, the dispatcher's scheduled runs must overlap (each
// drains longer than the period) and each must have time for its last batch
// after its budget (the timeout covers budget, a publish and the margin).
func TestTheDispatcherScheduleCoversEverySecondOfEveryMinute(t *testing.T) {
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := LoadTemplate(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tpl.Functions {
		if f.LogicalID != "DispatcherFunction" {
			continue
		}
		if len(f.Schedules) != 1 {
			t.Fatalf("DispatcherFunction has %d schedules, want 1", len(f.Schedules))
		}
		if every := f.Schedules[0].Every; dispatch.ScheduledBudget <= every {
			t.Errorf("a run drains %v but runs start every %v: delivery would pause between runs", dispatch.ScheduledBudget, every)
		}
		if need := dispatch.ScheduledBudget + dispatch.DefaultPublishTimeout + 3*time.Second; f.Timeout < need {
			t.Errorf("timeout %v leaves no room for the last batch after the %v budget (need %v)", f.Timeout, dispatch.ScheduledBudget, need)
		}
		return
	}
	t.Fatal("template.yaml has no DispatcherFunction")
}
