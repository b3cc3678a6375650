package testenv

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports FreePort hands out: below Linux's ephemeral range (32768-60999), so
// no outgoing connection can take one between the probe and the moment the
// service the test starts binds it, and below the project's own defaults
// (MariaDB 23306, Kafka 29092/29093, kfake 29192).
const (
	freePortLow  = 20000
	freePortHigh = 23000
)

var handedOut sync.Map // int -> struct{}: never the same port twice per process

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now, for
// a server that another process (a MariaDB or Kafka of the test's own) or a
// later call binds. Unlike a probe on port 0, the port is outside the
// kernel's ephemeral range, and no two calls in one test binary return the
// same port (a broker and its controller once got the same one).
func FreePort(t testing.TB) int {
	t.Helper()
	for range 500 {
		p := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if _, taken := handedOut.LoadOrStore(p, struct{}{}); taken {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use by someone else
		}
		ln.Close()
		return p
	}
	t.Fatalf("no free port in %d-%d after 500 tries", freePortLow, freePortHigh)
	return 0
}
