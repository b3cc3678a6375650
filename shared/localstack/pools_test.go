package localstack_test

import (
	"testing"

	"github.com/agentmesh/agentmesh/shared/localstack"
	"github.com/agentmesh/agentmesh/shared/localstack/localstacktest"
	"github.com/agentmesh/agentmesh/shared/push"
)

// The dispatcher and its push rounds run on a pool of their own, as the
// DispatcherFunction does on AWS, and the API's shared pool is sized for the
// stack's concurrency: on one pool of 10, every batch queued behind the
// sends in flight (delivery p99 over a second at 500 msg/s).
func TestTheDispatcherHasADatabasePoolOfItsOwn(t *testing.T) {
	st := localstacktest.Start(t, localstacktest.Options{Kafka: true, Push: true})
	if st.Dispatcher.DB == st.Env.DB {
		t.Fatal("the dispatcher shares the API functions' database pool")
	}
	if got := st.Dispatcher.DB.Stats().MaxOpenConnections; got <= 0 {
		t.Errorf("the dispatcher's pool allows %d connections", got)
	}
	if got := st.Env.DB.Stats().MaxOpenConnections; got != localstack.APIConns {
		t.Errorf("the API's pool allows %d connections, want localstack.APIConns = %d", got, localstack.APIConns)
	}
	s, ok := st.Dispatcher.Pusher.(*push.Sender)
	if !ok {
		t.Fatalf("the dispatcher's pusher is %T, want *push.Sender", st.Dispatcher.Pusher)
	}
	dir, ok := s.Directory.(*push.Service)
	if !ok {
		t.Fatalf("the push sender's directory is %T, want *push.Service", s.Directory)
	}
	if dir.DB != st.Dispatcher.DB {
		t.Error("the push rounds look connections up on the API's pool, not the dispatcher's")
	}
}
