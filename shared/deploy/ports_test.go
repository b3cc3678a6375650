package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/agentmesh/agentmesh/shared/kafka/kafkatest"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// TestTheLocalServicesListenOutsideTheEphemeralRange: a port inside the
// range the kernel hands to outgoing connections can be taken by any client
// a moment before the service binds it ("Address already in use"), which
// makes CI fail for no fault of the change under test.
func TestTheLocalServicesListenOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
			t.Fatalf("ip_local_port_range %q: %v", b, err)
		}
	}
	ports := map[string]string{}
	for _, s := range []struct{ script, variable string }{
		{"infra/mariadb.sh", "MESH_MARIADB_PORT"},
		{"infra/kafka.sh", "MESH_KAFKA_PORT"},
		{"infra/kafka.sh", "MESH_KAFKA_CONTROLLER_PORT"},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", s.script))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`\$\{` + s.variable + `:-(\d+)\}`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s sets no default for %s", s.script, s.variable)
		}
		ports[s.script+" "+s.variable] = string(m[1])
	}
	ports["mysqltest.DefaultDSN"] = regexp.MustCompile(`:(\d+)\)`).FindStringSubmatch(mysqltest.DefaultDSN)[1]
	ports["kafkatest.DefaultBrokers"] = regexp.MustCompile(`:(\d+)$`).FindStringSubmatch(kafkatest.DefaultBrokers)[1]
	for name, p := range ports {
		t.Run(name+" is outside "+strconv.Itoa(lo)+"-"+strconv.Itoa(hi), func(t *testing.T) {
			n, _ := strconv.Atoi(p)
			if n >= lo && n <= hi {
				t.Errorf("default port %d lies in the ephemeral range %d-%d", n, lo, hi)
			}
		})
	}
	if ports["infra/mariadb.sh MESH_MARIADB_PORT"] != ports["mysqltest.DefaultDSN"] || ports["infra/kafka.sh MESH_KAFKA_PORT"] != ports["kafkatest.DefaultBrokers"] {
		t.Errorf("the scripts and the test defaults disagree: %v", ports)
	}
}
