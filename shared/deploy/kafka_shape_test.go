package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The platform stack's Kafka: three brokers in three AZs with replication 3
// and min.insync.replicas 2 unless a development environment asks for two.
func TestThePlatformDefaultsToThreeAZsWithReplicationThree(t *testing.T) {
	platform := loadTemplate(t, "infra/aws/platform.yaml")
	param, _ := platform.Parameters["AvailabilityZones"].(map[string]any)
	cond, _ := loadConditions(t)["ThreeAZs"].(map[string]any)
	kafka := platform.props("KafkaCluster")
	props, _ := platform.props("KafkaConfiguration")["ServerProperties"].(map[string]any)
	branches, _ := props["Fn::If"].([]any)

	t.Run("three AZs is the default", func(t *testing.T) {
		if param["Default"] != "3" || fmt.Sprint(cond) != fmt.Sprint(map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "AvailabilityZones"}, "3"}}) {
			t.Fatalf("AvailabilityZones default %v, condition ThreeAZs %v", param["Default"], cond)
		}
	})
	t.Run("one broker per AZ: three, or two in the development shape", func(t *testing.T) {
		if got := fmt.Sprint(kafka["NumberOfBrokerNodes"]); got != "map[Fn::If:[ThreeAZs 3 2]]" {
			t.Errorf("NumberOfBrokerNodes is %s", got)
		}
		info, _ := kafka["BrokerNodeGroupInfo"].(map[string]any)
		if got := fmt.Sprint(info["ClientSubnets"]); !strings.Contains(got, "Fn::If:[ThreeAZs [map[Ref:PrivateSubnetA] map[Ref:PrivateSubnetB] map[Ref:PrivateSubnetC]]") {
			t.Errorf("ClientSubnets is %s, want the three subnets when ThreeAZs", got)
		}
	})
	t.Run("three brokers replicate 3 times and acknowledge on 2", func(t *testing.T) {
		if len(branches) != 3 || branches[0] != "ThreeAZs" {
			t.Fatalf("KafkaConfiguration.ServerProperties is %v, want !If [ThreeAZs, ...]", props)
		}
		three, two := fmt.Sprint(branches[1]), fmt.Sprint(branches[2])
		for _, want := range []string{"default.replication.factor=3\n", "min.insync.replicas=2\n", "auto.create.topics.enable=false\n"} {
			if !strings.Contains(three, want) {
				t.Errorf("the three-AZ broker settings lack %q:\n%s", want, three)
			}
		}
		for _, want := range []string{"default.replication.factor=2\n", "min.insync.replicas=1\n"} {
			if !strings.Contains(two, want) {
				t.Errorf("the two-AZ broker settings lack %q:\n%s", want, two)
			}
		}
	})
	t.Run("the cluster runs with those settings", func(t *testing.T) {
		ci, _ := kafka["ConfigurationInfo"].(map[string]any)
		if fmt.Sprint(ci["Arn"]) != "map[Fn::GetAtt:KafkaConfiguration.Arn]" {
			t.Errorf("KafkaCluster.ConfigurationInfo is %v", ci)
		}
	})
	t.Run("samconfig's development platform takes two AZs and production three", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join("..", "..", "samconfig.toml"))
		if err != nil {
			t.Fatal(err)
		}
		envs := samconfigDeploy(string(raw))
		for env, want := range map[string]string{"platform": "AvailabilityZones=2", "prod-platform": "AvailabilityZones=3"} {
			if !strings.Contains(" "+envs[env]["parameter_overrides"]+" ", " "+want+" ") {
				t.Errorf("%s overrides %q, want %s", env, envs[env]["parameter_overrides"], want)
			}
		}
	})
}

// loadConditions reads the platform template's Conditions (cfnTemplate
// keeps none), tags expanded as loadTemplate does.
func loadConditions(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "infra", "aws", "platform.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	top, _ := plain(doc.Content[0]).(map[string]any)
	conds, _ := top["Conditions"].(map[string]any)
	return conds
}
