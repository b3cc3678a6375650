package metrics_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentmesh/agentmesh/shared/metrics"
)

type emf struct {
	AWS struct {
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
}

func TestMetricsCarryTheStackDimension(t *testing.T) {
	tests := []struct {
		name      string
		stack     string
		wantDims  [][]string
		wantStack any
	}{
		{"a function of a stack emits its metrics under the stack's dimension", "agent-mesh-prod", [][]string{{"Stack"}}, "agent-mesh-prod"},
		{"outside a stack the metrics have no dimension", "", [][]string{{}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			s := &metrics.Sink{W: &buf, Stack: tc.stack}
			s.Emit(map[string]float64{"OutboxSent": 3, "OutboxOldestPendingSeconds": 1.5})
			var rec map[string]any
			var e emf
			if json.Unmarshal(buf.Bytes(), &rec) != nil || json.Unmarshal(buf.Bytes(), &e) != nil || len(e.AWS.CloudWatchMetrics) != 1 {
				t.Fatalf("not one EMF record: %s", buf.String())
			}
			cw := e.AWS.CloudWatchMetrics[0]
			if cw.Namespace != metrics.Namespace || !reflect.DeepEqual(cw.Dimensions, tc.wantDims) {
				t.Fatalf("namespace %q dimensions %v, want %q %v", cw.Namespace, cw.Dimensions, metrics.Namespace, tc.wantDims)
			}
			if rec["Stack"] != tc.wantStack || rec["OutboxSent"] != 3.0 {
				t.Fatalf("record %v: Stack %v, want %v", rec, rec["Stack"], tc.wantStack)
			}
		})
	}
}
