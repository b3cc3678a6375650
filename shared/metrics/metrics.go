// Package metrics emits CloudWatch metrics in the Embedded Metric Format: one
// JSON line on stdout that Lambda's log pipeline turns into metrics, with no
// API call on the hot path and no SDK linked.
package metrics

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every mesh metric; the alarms in
// template.yaml use it.
const Namespace = "AgentMesh"

// StackDimension is the dimension every metric carries when the function
// knows its stack (MESH_STACK_NAME, set by template.yaml): two stacks in one
// account never add up into one series, and each stack's alarms watch only
// their own.
const StackDimension = "Stack"

// Sink writes EMF lines; the zero value writes to stdout.
type Sink struct {
	mu sync.Mutex
	W  io.Writer
	// Stack is the value of the Stack dimension ("" for none).
	Stack string
}

// Default is the process's sink, in the stack named by MESH_STACK_NAME.
var Default = &Sink{Stack: os.Getenv("MESH_STACK_NAME")}

// Emit writes one EMF record holding the given values. Units: names ending
// in "Seconds" are Seconds, everything else is Count.
func (s *Sink) Emit(values map[string]float64) {
	if len(values) == 0 {
		return
	}
	type metric struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	var ms []metric
	rec := map[string]any{}
	for name, v := range values {
		unit := "Count"
		if len(name) > 7 && name[len(name)-7:] == "Seconds" {
			unit = "Seconds"
		}
		ms = append(ms, metric{Name: name, Unit: unit})
		rec[name] = v
	}
	dims := []string{}
	if s.Stack != "" {
		dims = append(dims, StackDimension)
		rec[StackDimension] = s.Stack
	}
	rec["_aws"] = map[string]any{
		"Timestamp": time.Now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace": Namespace, "Dimensions": [][]string{dims}, "Metrics": ms,
		}},
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.W
	if w == nil {
		w = os.Stdout
	}
	_, _ = w.Write(append(b, '\n'))
}
