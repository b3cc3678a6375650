package testenv

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortGivesDistinctBindablePortsOutsideTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p < freePortLow || p >= freePortHigh || p >= 32768 {
			t.Fatalf("port %d outside %d-%d", p, freePortLow, freePortHigh)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not bindable: %v", p, err)
		}
		ln.Close()
	}
}
