package kafkatest

import (
	"slices"
	"testing"
)

func TestBrokerListFollowsTheScriptsPort(t *testing.T) {
	cases := []struct {
		name, brokers, port string
		want                []string
	}{
		{"KAFKA_BROKERS wins", "b1:9092,b2:9092", "40000", []string{"b1:9092", "b2:9092"}},
		{"MESH_KAFKA_PORT moves infra/kafka.sh's broker", "", "40000", []string{"127.0.0.1:40000"}},
		{"nothing set is the default broker", "", "", []string{DefaultBrokers}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KAFKA_BROKERS", c.brokers)
			t.Setenv("MESH_KAFKA_PORT", c.port)
			if got := BrokerList(); !slices.Equal(got, c.want) {
				t.Errorf("BrokerList() = %v, want %v", got, c.want)
			}
		})
	}
}
