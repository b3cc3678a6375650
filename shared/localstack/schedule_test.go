package localstack

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/shared/dispatch"
)

// On AWS and here alike, the dispatcher's scheduled runs must overlap (each
// drains longer than the period) and each must have time for its last batch
// after its budget (the timeout covers budget, a publish and the margin).
func TestTheDispatcherScheduleCoversEverySecondOfEveryMinute(t *testing.T) {
	tpl, _ := repoTemplate(t)
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
